"""What the tests of a call sent again share (``test_redis_resend*.py``): brokers reaching a real
server, or each master of the session's 3-master cluster, through a ``CuttingProxy``, their tasks,
and cuts that check they were made (the call really was sent again)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest

from conveyor.brokers.redis import RedisBroker, config
from conveyor.brokers.redis.cluster import ClusterClient
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.ids import new_task_id
from conveyor.model import NewTask
from conveyor.testing.redis_cluster import LocalCluster

from .cutting_proxy import CuttingProxy

__all__ = ["LAYOUTS", "NOW", "cut_on_cluster", "cut_once", "open_broker", "pending", "proxied_cluster", "task"]

#: The key layouts every test on one server runs in: a slot per queue (custom ids and unique keys
#: claimed by ``take`` first), and one slot (the enqueue script checks them).
LAYOUTS = ("layout 5", "layout 4")
NOW = time.time()  # the wall clock: a task's unique key holds for a while from it


def open_broker(proxy: CuttingProxy, layout: str, namespace: str) -> RedisBroker:
    """A broker reaching the server through ``proxy``, with ``layout``'s keys."""
    through = RedisConfig.from_url(f"redis://127.0.0.1:{proxy.port}/0?namespace={namespace}")
    return RedisBroker(through, keys=Keys(namespace) if layout == "layout 4" else None)


def task(broker: RedisBroker, task_id: str | None = None, unique_key: str | None = None) -> NewTask:
    """A task of queue ``q``: a generated id unless ``task_id`` is given; a unique key holds 100 s."""
    suffix = broker.id_suffixes()
    generated = new_task_id() + (suffix("q") if suffix else "")
    return NewTask(
        id=task_id or generated,
        name="job",
        queue="q",
        payload="[[], {}]",
        unique_key=unique_key,
        unique_until=None if unique_key is None else NOW + 100,
    )


def pending(broker: RedisBroker) -> int:
    """Queue ``q``'s pending tasks."""
    return next(info.counts["pending"] for info in broker.queues(NOW) if info.name == "q")


def cut_once(proxy: CuttingProxy, marker: bytes, then: Callable[[], object] = lambda: None) -> Callable[[], None]:
    """Arm one cut; the returned check says it was made (the call really was sent again)."""
    cuts = proxy.cuts
    proxy.cut_after(marker, then=then)

    def made() -> None:
        assert proxy.cuts == cuts + 1 and proxy.armed == 0, "the connection was not cut after the call"

    return made


@contextmanager
def cut_on_cluster(proxies: Sequence[CuttingProxy], marker: bytes) -> Iterator[None]:
    """The next call holding ``marker`` cut once, whichever master it goes to; checked at the end."""
    cuts = sum(proxy.cuts for proxy in proxies)
    for proxy in proxies:  # the call goes to the master of its slot: one of them cuts it
        proxy.cut_after(marker)
    try:
        yield
    finally:
        for proxy in proxies:
            proxy.disarm()
    assert sum(proxy.cuts for proxy in proxies) == cuts + 1, "the connection was not cut after the call"


@contextmanager
def proxied_cluster(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CuttingProxy]]:
    """A proxy in front of each master of ``cluster``; the brokers made meanwhile reach every node
    through them (redis-py's ``address_remap`` maps the addresses the cluster announces)."""
    proxies = [CuttingProxy("127.0.0.1", node.port) for node in cluster.masters]
    to_proxy = {
        ("127.0.0.1", node.port): ("127.0.0.1", proxy.port)
        for node, proxy in zip(cluster.masters, proxies, strict=True)
    }
    remapped = functools.partial(ClusterClient, address_remap=lambda address: to_proxy.get(address, address))
    monkeypatch.setattr(config, "ClusterClient", remapped)
    try:
        yield proxies
    finally:
        for proxy in proxies:
            proxy.close()
