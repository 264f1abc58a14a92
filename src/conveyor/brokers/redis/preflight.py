"""The Redis broker's ``preflight`` (``ChecksServer``): the server settings that can lose tasks, on one
server or on every master of a cluster.

On one server: the eviction policy and persistence (``admin.preflight``), and with ``wait_replicas``
whether enough replicas are connected (``ReplicaWait.findings``). On a Redis Cluster the same checks run
on every master, each finding naming its master (``maxmemory-policy (127.0.0.1:7001)``): masters are
configured one by one, and one master that evicts loses the tasks of the queues it serves. They come
after a line on the cluster (slots served, masters, replicas) and one per master: its address, its slot
ranges, its replicas and their link, a warning when it has no replica (its failover would lose its
tasks, and its slots would have no one to serve them) or a replica's link is down.

The topology is read with ``CLUSTER SHARDS`` (Redis 7+, in ``NEEDED_ACL``), a replica's link from the
``health`` the cluster gives it and, where the ACL allows ``INFO``, from its master's own list of
connected replicas (a killed replica leaves it at once; the cluster marks it failed only after
``cluster-node-timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import redis

from conveyor.brokers.base import Finding
from conveyor.brokers.redis import admin
from conveyor.brokers.redis.faults import CLIENT_ERRORS, translated
from conveyor.brokers.redis.sentinel import SentinelRedis
from conveyor.brokers.redis.sentinel_checks import sentinel_finding

if TYPE_CHECKING:
    from redis.cluster import RedisCluster

    from conveyor.brokers.redis.replication import ReplicaWait

__all__ = ["Replica", "Shard", "findings", "read_shards"]

#: The hash slots of a Redis Cluster.
_SLOTS = 16384


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica of a master: ``host:port``, whether its link to the master is up, and why not."""

    address: str
    up: bool
    state: str  # "up", or what is wrong: "fail" (the cluster's health), "not connected to its master"


@dataclass(frozen=True, slots=True)
class Shard:
    """A master, the slot ranges it serves (inclusive pairs) and its replicas."""

    master: str
    slots: tuple[tuple[int, int], ...]
    replicas: tuple[Replica, ...]

    @property
    def slot_count(self) -> int:
        return sum(last - first + 1 for first, last in self.slots)

    def finding(self) -> Finding:
        """``master <address>``: its slots and replicas; not ok without a replica whose link is up."""
        ranges = ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in self.slots)
        served = f"slots {ranges} ({self.slot_count})" if self.slots else "no slots"
        if not self.replicas:
            detail = f"{served}; no replica: a failover of this master loses every task it holds"
            return Finding(f"master {self.master}", False, detail)
        down = [replica for replica in self.replicas if not replica.up]
        listed = ", ".join(f"{replica.address} {replica.state}" for replica in self.replicas)
        if down:
            detail = f"{served}; replica link down: {listed} (writes not on a live replica are lost at a failover)"
            return Finding(f"master {self.master}", False, detail)
        noun = "replica" if len(self.replicas) == 1 else "replicas"
        return Finding(f"master {self.master}", True, f"{served}; {noun} {listed}")


def findings(client: redis.Redis, wait: ReplicaWait | None, cluster: bool) -> list[Finding]:
    """The preflight of the server ``client`` talks to, or of every master of its cluster."""
    if not cluster:
        if isinstance(client, SentinelRedis):  # what the sentinels say first: where the master is
            return [sentinel_finding(client), *_server(client, wait)]
        return _server(client, wait)
    shards_client: RedisCluster = client  # type: ignore[assignment]
    try:
        shards = read_shards(shards_client)
    except CLIENT_ERRORS as exc:
        return [Finding("cluster", False, f"topology unreadable ({translated(exc)})")]
    found = [_summary(shards), *(shard.finding() for shard in shards)]
    for shard in shards:
        host, _, port = shard.master.rpartition(":")
        node = shards_client.get_node(host=host, port=int(port))  # type: ignore[no-untyped-call]
        if node is None:
            found.append(Finding(f"server configuration ({shard.master})", False, "not known to the client yet"))
            continue
        master = node.redis_connection or shards_client.get_redis_connection(node)
        found += [replace(f, name=f"{f.name} ({shard.master})") for f in _server(master, wait)]
    return found


def _server(client: redis.Redis, wait: ReplicaWait | None) -> list[Finding]:
    found = admin.preflight(client)
    return found if wait is None else found + wait.findings(client)


def _summary(shards: list[Shard]) -> Finding:
    masters = [shard for shard in shards if shard.slots]
    replicas = sum(len(shard.replicas) for shard in shards)
    served = sum(shard.slot_count for shard in shards)
    detail = f"{len(masters)} master(s) serving {served} of {_SLOTS} slots, {replicas} replica(s)"
    if served < _SLOTS:
        return Finding("cluster", False, f"{detail}: {_SLOTS - served} slots have no master, their calls fail")
    return Finding("cluster", True, detail)


def read_shards(client: RedisCluster) -> list[Shard]:
    """Every master of the cluster (``CLUSTER SHARDS``, asked of any node), in slot order, with its
    replicas' links (see the module docstring)."""
    reply: list[dict[str, Any]] = client.execute_command("CLUSTER SHARDS")  # type: ignore[no-untyped-call]
    shards = []
    for shard in reply:
        nodes = shard["nodes"]
        masters = [node for node in nodes if node["role"] == "master" and node["health"] == "online"]
        if not masters:
            continue  # a failed master's shard whose replica was promoted elsewhere, or one being set up
        master = _address(masters[0])
        flat = [int(slot) for slot in shard["slots"]]
        slots = tuple(sorted(zip(flat[::2], flat[1::2], strict=True)))
        connected = _connected_replicas(client, master)
        replicas = []
        for node in nodes:
            if node["role"] != "replica":
                continue
            address = _address(node)
            if node["health"] != "online":
                replicas.append(Replica(address, False, str(node["health"])))
            elif connected is not None and address not in connected:
                replicas.append(Replica(address, False, "not connected to its master"))
            else:
                replicas.append(Replica(address, True, "up"))
        shards.append(Shard(master, slots, tuple(replicas)))
    return sorted(shards, key=lambda shard: shard.slots or ((_SLOTS, _SLOTS),))


def _address(node: dict[str, Any]) -> str:
    return f"{node.get('endpoint') or node['ip']}:{node['port']}"


def _connected_replicas(client: RedisCluster, master: str) -> set[str] | None:
    """``host:port`` of the replicas ``master`` streams to (``INFO replication``, ``state=online``), or
    None when it cannot be asked (an ACL without ``INFO``, a node unknown to the client)."""
    host, _, port = master.rpartition(":")
    node = client.get_node(host=host, port=int(port))  # type: ignore[no-untyped-call]
    if node is None:
        return None
    try:
        info: dict[str, Any] = (node.redis_connection or client.get_redis_connection(node)).info("replication")
    except CLIENT_ERRORS:
        return None
    return {
        f"{value['ip']}:{value['port']}"
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    }
