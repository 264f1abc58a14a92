"""The pub/sub listener that Redis events and cancel announcements share (``brokers/redis/listener.py``),
on a private server: it survives a message it fails on, and ``close`` ends its thread for good."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.keys import Slot
from conveyor.brokers.redis.listener import Listener
from conveyor.model import BrokerPolicy

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
