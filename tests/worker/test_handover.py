"""Work found after idleness goes to the executors before any claimer runs again (``HAND_OVER_WAIT``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from conveyor import Conveyor, FakeClock, WorkerConfig
from conveyor.model import TaskRecord
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


def fetcher_finding(records: list[TaskRecord]) -> tuple[Fetcher, Buffer, list[int]]:
    """A fetcher whose wait for work and whose claims return ``records`` once (then nothing); the
    limit of each call is recorded."""
    app = Conveyor("memory://", clock=FakeClock(0.0))
    buffer = Buffer()
    fetcher = Fetcher(app, WorkerConfig(concurrency=4, poll_interval=60.0), Inflight(), buffer)
    calls: list[int] = []

    def found(room: int, queues: Sequence[str]) -> list[TaskRecord]:
        calls.append(room)
        return records if len(calls) == 1 else []

    fetcher._wait_and_claim = found  # type: ignore[method-assign]
    fetcher._claim = found  # type: ignore[method-assign]
    return fetcher, buffer, calls


def test_a_claimer_that_waited_for_work_lets_the_executors_take_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conveyor.worker.fetcher.HAND_OVER_WAIT", 30.0)
    fetcher, buffer, calls = fetcher_finding(claimed(2))
    claimer = threading.Thread(target=fetcher._round, args=(RetryDelay(0.1, 1.0),), kwargs={"wait": True})
    claimer.start()
    claimer.join(timeout=0.05)
    assert claimer.is_alive()  # the records wait in the buffer: the claimer waits with them
    assert buffer.get() is not None and buffer.get() is not None
    claimer.join(timeout=10.0)
    assert not claimer.is_alive()  # released by the last take, not by its 30 s wait
    assert calls == [4]


def test_a_busy_claimer_does_not_wait_for_the_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conveyor.worker.fetcher.HAND_OVER_WAIT", 30.0)
    fetcher, buffer, calls = fetcher_finding(claimed(2))
    started = time.monotonic()
    fetcher._round(RetryDelay(0.1, 1.0), wait=False)  # its last claim found work: it claims on at once
    assert time.monotonic() - started < 10.0
    assert calls == [4] and len(buffer.close()) == 2
