"""The pub/sub listener that Redis events and cancel announcements share (``brokers/redis/listener.py``),
on a private server: it survives a message it fails on, and ``close`` ends its thread for good."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis import listener as listener_module
from conveyor.brokers.redis.keys import Slot
from conveyor.brokers.redis.listener import Listener, follow_now
from conveyor.model import BrokerPolicy
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .split_replies import hears_split_messages

pytestmark = pytest.mark.redis


@pytest.fixture
def broker(redis_url: str) -> Iterator[RedisBroker]:
    opened = RedisBroker.from_url(redis_url, BrokerPolicy())
    yield opened
    opened.close()


def one_slot(broker: RedisBroker) -> Callable[[], list[Slot]]:
    return lambda: [broker.keys.slot(broker.keys.prefix)]


def listener_channel(slot: Slot) -> str:
    return slot.prefix + "test-listener"


def test_a_message_the_callback_fails_on_does_not_stop_the_listener(broker: RedisBroker) -> None:
    heard: queue.SimpleQueue[str] = queue.SimpleQueue()

    def on_message(data: str) -> None:
        if data == "bad":
            raise ValueError("cannot read this one")
        heard.put(data)

    channel = broker.keys.prefix + "test-listener"
    listener = Listener(lambda: broker.client, one_slot(broker), listener_channel, 2.0, on_message, what="test")
    try:
        assert listener.start()
        broker.client.spublish(channel, "bad")
        broker.client.spublish(channel, "good")
        assert heard.get(timeout=5) == "good"
    finally:
        listener.close()


def threads_named(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_close_ends_the_thread_and_a_later_start_does_not_restart_it(broker: RedisBroker) -> None:
    listener = Listener(lambda: broker.client, one_slot(broker), listener_channel, 2.0, lambda data: None, what="test")
    assert listener.start()
    (thread,) = threads_named("conveyor-redis-test")
    listener.close()
    assert not thread.is_alive()
    listener.start()
    assert threads_named("conveyor-redis-test") == []


@pytest.fixture
def slow_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll far longer than any wait below: only the listener's bell can end those waits in time."""
    monkeypatch.setattr(listener_module, "_POLL", 30.0)


@pytest.mark.usefixtures("slow_poll")
@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.slow)])
def test_a_refresh_asked_for_and_a_close_wake_the_thread_at_once(where: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("redis_url" if where == "server" else "redis_cluster_url")
    broker = RedisBroker.from_url(url, BrokerPolicy())
    reads: list[int] = []

    def slots() -> list[Slot]:
        reads.append(len(reads))
        return [broker.keys.slot(broker.keys.prefix)]

    listener = Listener(lambda: broker.client, slots, listener_channel, 5.0, lambda data: None, what="bell")
    try:
        assert listener.start()
        (thread,) = threads_named("conveyor-redis-bell")
        for _ in range(3):  # each ask is a turn of its own, not the next poll 30 s away
            assert follow_now([listener], timeout=5.0)
        assert len(reads) == 4
        listener.close()
        assert not thread.is_alive()  # close() joins for 5 s at most: a poll of 30 s would outlast it
    finally:
        listener.close()
        broker.close()


def test_a_message_split_over_two_segments_is_waited_for_not_taken_for_a_lost_connection(
    proxy: CuttingProxy, redis_server: RedisServer
) -> None:
    publisher = redis_server.client()
    try:
        hears_split_messages(f"redis://127.0.0.1:{proxy.port}/0?namespace=t{uuid.uuid4().hex}", publisher, [proxy])
    finally:
        publisher.close()


@pytest.mark.slow
def test_a_message_split_over_two_segments_is_waited_for_on_a_cluster(
    cluster_proxies: list[CuttingProxy], redis_cluster: LocalCluster
) -> None:
    publisher = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.masters[0].port)
    try:
        hears_split_messages(redis_cluster.namespace_url(), publisher, cluster_proxies)
    finally:
        publisher.close()


def test_an_idle_listener_still_checks_its_connection_s_health(redis_server: RedisServer) -> None:
    """With no message to read, the thread only waits on its sockets: the health check (a PING once
    the connection was idle for ``health_check_interval``) must still go out, as a read would send it."""
    name = f"idle-{uuid.uuid4().hex[:8]}"
    client = redis.Redis(port=redis_server.port, health_check_interval=1, client_name=name, decode_responses=True)
    admin = redis_server.client()
    slot = Slot(prefix=f"{{t{uuid.uuid4().hex}}}:")
    listener = Listener(lambda: client, lambda: [slot], listener_channel, 5.0, lambda data: None, what="idle")

    def pinged() -> bool:
        return any(info.get("name") == name and info.get("cmd") == "ping" for info in admin.client_list())

    try:
        assert listener.start()
        poll_until(pinged, timeout=10.0, message="a health check PING from the idle listener's connection")
    finally:
        listener.close()
        client.close()
        admin.close()
