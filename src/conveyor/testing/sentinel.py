"""A private primary with replicas, optionally under Redis Sentinel, for failover tests.

``ReplicaSet`` starts one master and ``replicas`` replicas (``--replicaof``, diskless sync without
delay) from the same binary as ``RedisServer`` on free 127.0.0.1 ports, and waits until every replica's
link to the master is up. ``SentinelGroup`` adds ``sentinels`` sentinel processes (the server binary in
``--sentinel`` mode, one config file each) that monitor it under ``service``, with a short
``down-after-milliseconds`` and ``failover-timeout`` so a killed master is replaced within seconds; it
waits until each sentinel knows the replicas and the other sentinels (needed to elect a leader).
Everything is stopped by PID (``stop()``, the context manager, or ``RedisServer``'s exit hook).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import redis

from conveyor.testing.redis_server import RedisServer, Started, find_server_binary

__all__ = ["ReplicaSet", "SentinelGroup", "SentinelServer", "poll"]


def poll(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Call ``check`` until it returns True (a ``RedisError`` counts as False); raise ``TimeoutError``
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gave up after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)  # polling other processes' progress, with a deadline


class ReplicaSet(Started):
    """One master and ``replicas`` replicas of it. ``servers[0]`` is the first master."""

    def __init__(self, replicas: int = 1, *, binary: str | None = None, start_timeout: float = 15.0) -> None:
        self.binary = binary or find_server_binary()
        self.start_timeout = start_timeout
        self.master = RedisServer(binary=self.binary, extra_args=("--repl-diskless-sync-delay", "0"))
        self.replicas: list[RedisServer] = []
        self._count = replicas

    @property
    def servers(self) -> list[RedisServer]:
        return [self.master, *self.replicas]

    def start(self) -> Self:
        self.master.start()
        for _ in range(self._count):
            replica = RedisServer(
                binary=self.binary,
                extra_args=("--replicaof", "127.0.0.1", str(self.master.port), "--repl-diskless-sync-delay", "0"),
            )
            self.replicas.append(replica)
            replica.start()
        for replica in self.replicas:
            poll(
                lambda replica=replica: replica.info("replication").get("master_link_status") == "up",  # type: ignore[misc]
                self.start_timeout,
                f"replica :{replica.port} to sync with :{self.master.port}",
            )
        return self

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


class SentinelServer(RedisServer):
    """The server binary as a sentinel monitoring ``service`` at ``master_port``."""

    def __init__(
        self,
        *,
        binary: str,
        service: str,
        master_port: int,
        quorum: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        extra_config: str = "",
    ) -> None:
        super().__init__(binary=binary)
        self.extra_config = extra_config  # more configuration lines (TLS, for one)
        self.service = service
        self.master_port = master_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        # sentinel rewrites its configuration file, so each gets its own, in its own directory
        config = self.directory / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode yes\nloglevel warning\n"
            f"logfile {self.directory / 'server.log'}\ndir {self.directory}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.master_port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {self.service} 1\n{self.extra_config}",
            encoding="utf-8",
        )
        return [self.binary, str(config), "--sentinel"]


class SentinelGroup(Started):
    """A :class:`ReplicaSet` watched by ``sentinels`` sentinels (a majority as quorum) as ``service``."""

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 3,
        *,
        service: str = "conveyor",
        down_after_ms: int = 400,
        failover_timeout_ms: int = 2000,
        start_timeout: float = 20.0,
    ) -> None:
        self.service = service
        self.start_timeout = start_timeout
        self.replica_set = ReplicaSet(replicas, start_timeout=start_timeout)
        self.sentinels: list[SentinelServer] = []
        self._count = sentinels
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms

    @property
    def master(self) -> RedisServer:
        """The server started as master (not necessarily the master now: see :meth:`master_port`)."""
        return self.replica_set.master

    @property
    def servers(self) -> list[RedisServer]:
        return self.replica_set.servers

    def url(self, **options: str) -> str:
        """``redis+sentinel://`` naming every sentinel and the service, with ``options`` as the query."""
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"redis+sentinel://{hosts}/{self.service}" + (f"?{query}" if query else "")

    def master_port(self) -> int:
        """The master's port as the first sentinel that answers reports it."""
        for port in self._reported_ports():
            return port
        raise redis.ConnectionError("no sentinel answered")

    def _reported_ports(self) -> Iterator[int]:
        """The master's port as each sentinel that answers reports it, in the sentinels' order."""
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                address: Any = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            finally:
                client.close()
            yield int(address[1])

    def server_at(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def start(self) -> Self:
        self.replica_set.start()
        for _ in range(self._count):
            sentinel = SentinelServer(
                binary=self.replica_set.binary,
                service=self.service,
                master_port=self.master.port,
                quorum=self._count // 2 + 1,
                down_after_ms=self._down_after_ms,
                failover_timeout_ms=self._failover_timeout_ms,
            )
            self.sentinels.append(sentinel)
            sentinel.start()
        for sentinel in self.sentinels:
            poll(lambda sentinel=sentinel: self._knows_all(sentinel), self.start_timeout, "the sentinels to meet")  # type: ignore[misc]
        return self

    def _knows_all(self, sentinel: SentinelServer) -> bool:
        client = sentinel.client()
        try:
            reply: Any = client.execute_command("SENTINEL", "MASTER", self.service)  # type: ignore[no-untyped-call]
        finally:
            client.close()
        state = dict(zip(reply[::2], reply[1::2], strict=True)) if isinstance(reply, list) else reply
        return bool(
            int(state["num-other-sentinels"]) >= self._count - 1
            and int(state["num-slaves"]) >= len(self.replica_set.replicas)
        )

    def wait_for_new_master(self, old_port: int, timeout: float = 30.0) -> RedisServer:
        """Poll until every sentinel reports the same master other than ``old_port`` and it answers as
        master. A sentinel still naming the old master would take it back as master if it restarted
        (empty) now, and could make the promoted replica sync from it."""

        def promoted() -> bool:
            ports = list(self._reported_ports())
            if len(ports) != len(self.sentinels) or len(set(ports)) != 1 or ports[0] == old_port:
                return False
            return self.server_at(ports[0]).info("replication").get("role") == "master"

        poll(promoted, timeout, f"the sentinels to replace the master on :{old_port}")
        return self.server_at(self.master_port())

    def stop(self) -> None:
        for sentinel in reversed(self.sentinels):
            sentinel.stop()
        self.replica_set.stop()
