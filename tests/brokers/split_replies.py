"""A listener reading through a :class:`CuttingProxy` that delivers each reply in two halves: shared by
the plain and the TLS cases (``test_redis_listener.py``, ``test_redis_security.py``)."""

from __future__ import annotations

import queue
from collections.abc import Sequence

import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.listener import Listener
from conveyor.model import BrokerPolicy

from .cutting_proxy import CuttingProxy

__all__ = ["hears_split_messages"]


def hears_split_messages(
    url: str, publisher: redis.Redis | redis.RedisCluster, proxies: Sequence[CuttingProxy]
) -> None:
    """A listener on ``url`` (through ``proxies``, one per node) hears three messages published by ``publisher`` (on
    the server itself) while each reply reaches it in halves 0.3 s apart, on the connection it had: a
    read that did not wait for a reply's second half took the split for a lost connection, reconnected,
    and missed what was published meanwhile."""
    broker = RedisBroker.from_url(url, BrokerPolicy())
    heard: queue.SimpleQueue[str] = queue.SimpleQueue()
    slot = broker.keys.slot(broker.keys.prefix)
    channel = slot.prefix + "split-replies"
    listener = Listener(
        lambda: broker.client, lambda: [slot], lambda s: s.prefix + "split-replies", 5.0, heard.put, what="split"
    )
    try:
        assert listener.start()
        connections = [proxy.connections for proxy in proxies]
        for proxy in proxies:
            proxy.split = 0.3
        for n in range(3):
            publisher.spublish(channel, f"message {n}")
        assert [heard.get(timeout=10.0) for _ in range(3)] == ["message 0", "message 1", "message 2"]
        assert [proxy.connections for proxy in proxies] == connections  # not one reconnection
    finally:
        for proxy in proxies:
            proxy.split = 0.0
        listener.close()
        broker.close()
