"""The Redis broker's reads and bookkeeping made of plain commands, not scripts: a task's row and its
side hashes, queue statistics decoded, pause flags, the worker registry, per-minute history, task
declarations, and the preflight check of the server's settings.

Each function takes the client and the namespace's ``Keys``; ``RedisBroker`` keeps the contract's
methods and calls these. Every function raises ``conveyor.errors`` (``translate_errors``), never
redis-py's errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import redis

from conveyor.brokers.capabilities import Finding
from conveyor.brokers.declarations import decode_declaration, encode_declaration
from conveyor.brokers.redis.codec import decode_history, decode_worker, encode_worker
from conveyor.brokers.redis.faults import translate_errors
from conveyor.brokers.redis.keys import Keys, Slot
from conveyor.errors import BrokerError
from conveyor.history import QueueMinute
from conveyor.model import QueueInfo, QueueSettings, TaskDeclaration, TaskState, WorkerInfo

__all__ = [
    "declare_tasks",
    "declared_tasks",
    "history",
    "preflight",
    "queue_infos",
    "register_worker",
    "set_paused",
    "task_item",
    "unregister_worker",
    "workers",
]


def task_item(client: redis.Redis, keys: Slot, task_id: str) -> list[Any]:
    """What ``codec.decode_record`` reads for one task (``keys``: its slot): its row, result, last
    error, failures, limit and traceback."""
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for key in (keys.rows, keys.results, keys.lasterr):
            pipe.hget(key, task_id)
        pipe.lrange(keys.errors(task_id), 0, -1)
        pipe.hget(keys.limits, task_id)
        pipe.hget(keys.tracebacks, task_id)
        items: list[Any] = pipe.execute()
        return items


def queue_infos(rows: Sequence[Any]) -> list[QueueInfo]:
    """``stats.lua``'s rows (settings, then counts by state, then the oldest pending's age), by name."""
    infos = []
    for row in rows:
        name, max_size, concurrency, aging, paused = row[:5]
        settings = QueueSettings(
            name=name,
            max_size=int(float(max_size)) if max_size else None,
            concurrency=int(float(concurrency)) if concurrency else None,
            aging=float(aging) if aging else None,
            paused=paused == "1",
        )
        counts = dict(zip(("scheduled", "pending", "active", "retry", "completed", "archived"), row[5:11], strict=True))
        counts = {state.value: int(counts[state.value]) for state in TaskState}
        counts["total"] = sum(counts.values())
        infos.append(QueueInfo(settings, counts, float(row[11]) if row[11] else None))
    return sorted(infos, key=lambda info: info.name)


def set_paused(client: redis.Redis, keys: Keys, queue: str, paused: bool) -> None:
    """Sets the queue's flag (its slot), then registers it (namespace slot), in one round trip: the
    order ``configure`` keeps (``broker.py``), which a ``forget_queue`` running meanwhile sees."""
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        pipe.hset(keys.slot(keys.queue_prefix(queue)).settings(queue), "pa", "1" if paused else "0")
        pipe.sadd(keys.queues, queue)
        pipe.execute()


def register_worker(client: redis.Redis, keys: Keys, info: WorkerInfo, now: float, ttl: float) -> None:
    with translate_errors():
        dead = client.zrangebyscore(keys.worker_ttl, "-inf", repr(float(now)), start=0, num=100)
        pipe = client.pipeline(transaction=True)
        if dead:
            pipe.zrem(keys.worker_ttl, *dead)
            pipe.hdel(keys.workers, *dead)
            pipe.hdel(keys.worker_commands, *dead)
        pipe.hset(keys.workers, info.id, encode_worker(replace(info, last_seen=now)))
        pipe.zadd(keys.worker_ttl, {info.id: now + ttl})
        pipe.execute()


def unregister_worker(client: redis.Redis, keys: Keys, worker_id: str) -> None:
    with translate_errors():
        pipe = client.pipeline(transaction=True)
        pipe.hdel(keys.workers, worker_id)
        pipe.zrem(keys.worker_ttl, worker_id)
        pipe.hdel(keys.worker_commands, worker_id)
        pipe.execute()


def command_worker(client: redis.Redis, keys: Keys, worker_id: str, command: str, now: float, ttl: float) -> None:
    with translate_errors():
        client.hset(keys.worker_commands, worker_id, f"{now + ttl!r} {command}")


def worker_command(client: redis.Redis, keys: Keys, worker_id: str, now: float) -> str | None:
    with translate_errors():
        text = cast("str | None", client.hget(keys.worker_commands, worker_id))
    if text is None:
        return None
    until, _, command = text.partition(" ")
    return command if float(until) > now else None


def workers(client: redis.Redis, keys: Keys, now: float) -> list[WorkerInfo]:
    with translate_errors():
        ids = sorted(cast("list[str]", client.zrangebyscore(keys.worker_ttl, f"({float(now)!r}", "+inf")))
        texts = cast("list[str | None]", client.hmget(keys.workers, ids) if ids else [])
    return [decode_worker(text) for text in texts if text is not None]


def history(client: redis.Redis, slots: Sequence[Slot], first: int, last: int) -> list[QueueMinute]:
    """The counters of minutes ``first`` to ``last`` of the queues of ``slots`` (each slot counts its own)."""
    minutes = range(first, last + 1)
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for slot in slots:
            for minute in minutes:
                pipe.hgetall(slot.history(minute))
        replies = cast("list[dict[str, str]]", pipe.execute())
    rows: list[QueueMinute] = []
    for place, fields in enumerate(replies):
        rows += decode_history(minutes[place % len(minutes)], fields)
    return rows


def declare_tasks(client: redis.Redis, keys: Keys, declarations: Sequence[TaskDeclaration]) -> None:
    if declarations:
        with translate_errors():
            client.hset(keys.declared, mapping={d.name: encode_declaration(d) for d in declarations})


def declared_tasks(client: redis.Redis, keys: Keys, names: Sequence[str] | None) -> dict[str, TaskDeclaration]:
    with translate_errors():
        texts: list[str | None]
        if names is None:
            texts = list(cast("dict[str, str]", client.hgetall(keys.declared)).values())
        else:
            texts = cast("list[str | None]", client.hmget(keys.declared, list(names)) if names else [])
    found = [decode_declaration(text) for text in texts if text is not None]
    return {d.name: d for d in sorted(found, key=lambda d: d.name)}


def preflight(client: redis.Redis) -> list[Finding]:
    """The server settings that can lose tasks: the eviction policy and persistence (``ChecksServer``)."""
    try:
        with translate_errors():
            config = client.config_get("maxmemory-policy")
            config.update(client.config_get("appendonly"))
            config.update(client.config_get("save"))
    except BrokerError as exc:
        detail = f"unreadable ({exc}); check persistence and eviction by hand"
        return [Finding("server configuration", False, detail)]
    findings: list[Finding] = []
    policy = config.get("maxmemory-policy")
    if policy == "noeviction":
        findings.append(Finding("maxmemory-policy", True, policy))
    elif policy is not None:
        detail = f"{policy!r} lets Redis evict task data; set it to 'noeviction'"
        findings.append(Finding("maxmemory-policy", False, detail))
    if config.get("appendonly") == "yes":
        findings.append(Finding("persistence", True, "appendonly yes"))
    elif config.get("save"):
        findings.append(Finding("persistence", True, f"save {config['save']}"))
    elif config:  # a server that shows none of its settings tells nothing about persistence
        detail = "off (appendonly no, no save points): a restart loses every task"
        findings.append(Finding("persistence", False, detail))
    return findings
