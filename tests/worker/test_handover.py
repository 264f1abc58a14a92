"""Work found after idleness goes to the executors before any claimer runs again (``HAND_OVER_WAIT``)."""

from __future__ import annotations

import threading
import time

import pytest

from conveyor import Conveyor, FakeClock, WorkerConfig
from conveyor.brokers.base import Broker
from conveyor.model import TaskRecord
from conveyor.testing import SpyBroker
from conveyor.worker.buffer import Buffer
from conveyor.worker.fetcher import Fetcher
from conveyor.worker.inflight import Inflight
from conveyor.worker.service import RetryDelay


def claimed(count: int) -> list[TaskRecord]:
    """``count`` tasks claimed from a memory app on a FakeClock."""
    app = Conveyor("memory://", clock=FakeClock(0.0))

    @app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * count)
    return app.broker.claim(["default"], 0.0, 30.0, limit=count)


def test_wait_taken_returns_once_every_record_was_taken() -> None:
    buffer = Buffer()
    assert buffer.wait_taken(10.0) is True  # empty: at once
    buffer.put_many(claimed(2))
    assert buffer.wait_taken(0.01) is False  # nobody takes them: the timeout passes
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(buffer.wait_taken(30.0)))
    waiter.start()
    assert buffer.get() is not None
    waiter.join(timeout=0.05)
    assert waiter.is_alive()  # one record is still there
    assert buffer.get() is not None
    waiter.join(timeout=10.0)
    assert results == [True]  # woken by the last take, not by its 30 s timeout


def test_wait_taken_returns_when_the_buffer_closes() -> None:
    buffer = Buffer()
    buffer.put_many(claimed(1))
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(buffer.wait_taken(30.0)))
    waiter.start()
    assert len(buffer.close()) == 1
    waiter.join(timeout=10.0)
    assert results == [True]


def fetcher_finding(count: int) -> tuple[Fetcher, Buffer, SpyBroker[Broker]]:
    """A fetcher on a memory broker (seen through a spy, to read the limit of each claim) holding
    ``count`` pending tasks. They were enqueued before any claim of its thread, so no ring ends its wait
    for work (``MemoryBroker.wait_for_work``): that lasts ``poll_interval``, 10 ms."""
    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy, clock=FakeClock(0.0))

    @app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * count)
    buffer = Buffer()
    fetcher = Fetcher(app, WorkerConfig(concurrency=4, poll_interval=0.01), Inflight(), buffer)
    return fetcher, buffer, spy


def limits(spy: SpyBroker[Broker]) -> list[int]:
    return [call.arguments["limit"] for call in spy.calls_to("claim")]


def test_a_claimer_that_waited_for_work_lets_the_executors_take_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conveyor.worker.fetcher.HAND_OVER_WAIT", 30.0)
    fetcher, buffer, spy = fetcher_finding(2)
    claimer = threading.Thread(target=fetcher._round, args=(RetryDelay(0.1, 1.0),), kwargs={"wait": True})
    claimer.start()
    claimer.join(timeout=0.05)
    assert claimer.is_alive()  # the records wait in the buffer: the claimer waits with them
    assert buffer.get() is not None and buffer.get() is not None
    claimer.join(timeout=10.0)
    assert not claimer.is_alive()  # released by the last take, not by its 30 s wait
    assert limits(spy) == [4]


def test_a_busy_claimer_does_not_wait_for_the_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conveyor.worker.fetcher.HAND_OVER_WAIT", 30.0)
    fetcher, buffer, spy = fetcher_finding(2)
    started = time.monotonic()
    fetcher._round(RetryDelay(0.1, 1.0), wait=False)  # its last claim found work: it claims on at once
    assert time.monotonic() - started < 10.0
    assert limits(spy) == [4] and len(buffer.close()) == 2
