"""Masters with one replica each, as ``wait_replicas`` tests need them: a single master and its
replica (``ReplicaSet``) or a 3-master cluster with a replica per master (``LocalCluster``), behind
one small interface so the same tests run on both (``test_redis_replication.py``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from urllib.parse import urlencode

import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.model import BrokerPolicy
from conveyor.testing.redis_server import RedisServer

__all__ = ["Replicated"]


@dataclass(frozen=True)
class Replicated:
    """``url`` (without a query) and each master paired with its one replica."""

    kind: str
    url: str
    pairs: Sequence[tuple[RedisServer, RedisServer]]

    def open(self, namespace: str, **options: str) -> RedisBroker:
        return RedisBroker.from_url(f"{self.url}?{urlencode({'namespace': namespace, **options})}", BrokerPolicy())

    @contextmanager
    def replicas_stopped(self) -> Iterator[None]:
        """Every replica frozen (SIGSTOP) for the block: they receive nothing and confirm nothing, while
        their masters keep the link (nothing is disconnected within a test)."""
        with ExitStack() as stack:
            for _, replica in self.pairs:
                pid = replica.pid
                assert pid is not None
                os.kill(pid, signal.SIGSTOP)
                stack.callback(os.kill, pid, signal.SIGCONT)
            yield

    def mirrored(self, namespace: str) -> bool:
        """True if every master's keys of ``namespace`` are on its replica, with the same values, now."""
        return all(
            _contents(master, namespace, replica=False) == _contents(replica, namespace, replica=True)
            for master, replica in self.pairs
        )


def _contents(node: RedisServer, namespace: str, replica: bool) -> dict[str, object]:
    """Every key of ``namespace`` on ``node`` with its value, read by type (``DUMP`` would differ
    between copies of one large hash: it serialises the table in its own order)."""
    client = redis.Redis(
        host="127.0.0.1", port=node.port, single_connection_client=True, socket_timeout=5, decode_responses=True
    )
    read = {
        "string": client.get,
        "hash": client.hgetall,
        "list": lambda key: client.lrange(key, 0, -1),
        "set": lambda key: sorted(client.smembers(key)),
        "zset": lambda key: client.zrange(key, 0, -1, withscores=True),
        "stream": lambda key: client.xrange(key),
    }
    try:
        if replica and _is_cluster(client):
            client.execute_command("READONLY")  # type: ignore[no-untyped-call]
        keys = sorted(client.scan_iter(match=f"*{namespace}*", count=1000))
        return {key: read[str(client.type(key))](key) for key in keys}  # type: ignore[no-untyped-call]
    finally:
        client.close()


def _is_cluster(client: redis.Redis) -> bool:
    return bool(client.info("cluster").get("cluster_enabled"))
