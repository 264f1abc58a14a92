"""``AnnouncesCancels``: memory and Redis announce each cancel of a running task (and only those), to
watchers of the same broker object and, on Redis, of any other one sharing the namespace."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest

from conveyor.brokers import open_broker
from conveyor.brokers.base import AnnouncesCancels, Broker
from conveyor.model import BrokerPolicy, NewTask

NOW = 1_700_000_000.0


@pytest.fixture
def broker(broker_url: str) -> Iterator[Broker]:
    opened = open_broker(broker_url, BrokerPolicy())
    if not isinstance(opened, AnnouncesCancels):
        opened.close()
        pytest.skip("this broker does not announce cancels (its workers learn at their heartbeat)")
    yield opened
    opened.close()


def watch(broker: Broker) -> queue.SimpleQueue[str]:
    assert isinstance(broker, AnnouncesCancels)
    heard: queue.SimpleQueue[str] = queue.SimpleQueue()
    broker.watch_cancels(heard.put)
    return heard


def test_a_cancel_of_a_running_task_is_announced_and_one_of_a_waiting_task_is_not(broker: Broker) -> None:
    heard = watch(broker)
    broker.enqueue(
        [
            NewTask(id="waiting", name="job", queue="default", payload="[]"),
            NewTask(id="running", name="job", queue="default", payload="[]"),
        ],
        NOW,
    )
    assert [r.id for r in broker.claim(["default"], NOW, 30.0)] == ["waiting"]
    broker.enqueue([NewTask(id="later", name="job", queue="default", payload="[]")], NOW)
    broker.cancel("later", NOW)  # pending: nobody runs it, nothing to announce
    broker.cancel("waiting", NOW)  # claimed first, so it is the running one
    assert heard.get(timeout=5) == "waiting"
    assert heard.empty()


def test_a_cancel_made_through_another_broker_object_is_announced(broker: Broker, broker_url: str) -> None:
    if broker_url.startswith("memory"):
        pytest.skip("a memory broker is one object")
    heard = watch(broker)
    other = open_broker(broker_url, BrokerPolicy())
    try:
        broker.enqueue([NewTask(id="t", name="job", queue="default", payload="[]")], NOW)
        assert broker.claim(["default"], NOW, 30.0)
        other.cancel("t", NOW)
        assert heard.get(timeout=5) == "t"
    finally:
        other.close()


def test_a_watcher_that_stopped_watching_hears_nothing(broker: Broker) -> None:
    assert isinstance(broker, AnnouncesCancels)
    heard: queue.SimpleQueue[str] = queue.SimpleQueue()
    still: queue.SimpleQueue[str] = queue.SimpleQueue()
    unwatch = broker.watch_cancels(heard.put)
    broker.watch_cancels(still.put)
    unwatch()
    broker.enqueue([NewTask(id="t", name="job", queue="default", payload="[]")], NOW)
    assert broker.claim(["default"], NOW, 30.0)
    broker.cancel("t", NOW)
    assert still.get(timeout=5) == "t"
    assert heard.empty()
