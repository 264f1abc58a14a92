"""What the sentinels of a ``redis+sentinel://`` URL say of its service: one ``Finding`` that the
preflight puts first (``conveyor doctor``'s ``sentinels`` row, a starting worker's log).

Each sentinel of the URL is asked which master it names (``SENTINEL GET-MASTER-ADDR-BY-NAME``) and the
first that answers for the replicas it knows (``SENTINEL REPLICAS``) and the quorum (``SENTINEL
MASTER``). Not ok when a sentinel does not answer or names another master (a failover not agreed yet,
or a sentinel watching another group), when fewer sentinels answer than the quorum (no failover can be
decided), or when no replica is online (a failover would have none to promote, and the master's writes
live on it alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import redis

from conveyor.brokers.base import Finding

if TYPE_CHECKING:
    from conveyor.brokers.redis.sentinel import SentinelRedis

__all__ = ["sentinel_finding"]


def sentinel_finding(client: SentinelRedis) -> Finding:
    """The ``sentinels`` finding of ``client``'s service (see the module's text)."""
    service: str = client.connection_pool.service_name  # type: ignore[attr-defined]
    nodes: list[redis.Redis] = list(client.sentinels.sentinels) if client.sentinels is not None else []
    named: dict[str, str] = {}  # sentinel -> the master it names
    silent: list[str] = []
    replicas: list[dict[str, Any]] | None = None
    quorum: int | None = None
    for node in nodes:
        where = _address(node)
        try:
            answer = cast("tuple[bytes | str, int] | None", node.sentinel_get_master_addr_by_name(service))
            if replicas is None and answer:
                replicas = list(node.sentinel_slaves(service))
                quorum = int(cast("dict[str, Any]", node.sentinel_master(service)).get("quorum", 0))
        except redis.RedisError:
            silent.append(where)
            continue
        named[where] = "none" if not answer else f"{_text(answer[0])}:{answer[1]}"
    masters = sorted(set(named.values()))
    if not named:
        return Finding("sentinels", False, f"none of {len(nodes)} answered for service {service!r}")
    online = [r for r in replicas or [] if _online(r)]
    problems: list[str] = []
    if len(masters) > 1:
        problems.append("they name different masters: " + ", ".join(f"{s} names {m}" for s, m in sorted(named.items())))
    if silent:
        problems.append("not answering: " + ", ".join(silent))
    if quorum and len(named) < quorum:
        problems.append(f"fewer than the quorum of {quorum} answer: no failover can be decided")
    if not online:
        problems.append("no replica online: a failover would have none to promote")
    master = max(masters, key=lambda address: _count(named, address))  # the most named: sorted, so stable
    head = f"master {master} named by {_count(named, master)} of {len(nodes)} sentinel(s)"
    noun = "replica" if len(online) == 1 else "replicas"
    detail = f"{head}; {len(online)} {noun} online" + (f" ({', '.join(_where(r) for r in online)})" if online else "")
    if problems:
        return Finding("sentinels", False, f"{detail}; " + "; ".join(problems))
    return Finding("sentinels", True, detail)


def _count(named: dict[str, str], master: str) -> int:
    return sum(1 for value in named.values() if value == master)


def _online(replica: dict[str, Any]) -> bool:
    down = replica.get("is_sdown") or replica.get("is_odown") or replica.get("is_disconnected")
    return not down and replica.get("master-link-status") == "ok"


def _where(replica: dict[str, Any]) -> str:
    return f"{_text(replica.get('ip', '?'))}:{replica.get('port', '?')}"


def _address(node: redis.Redis) -> str:
    kwargs = node.connection_pool.connection_kwargs
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
