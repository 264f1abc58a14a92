"""The prefetch allowance: fixed, or as many tasks as the pool starts in ``HORIZON`` at its recent rate."""

from __future__ import annotations

import threading
from collections.abc import Callable

from conveyor import Conveyor, FakeClock, Worker
from conveyor.worker.prefetch import HORIZON, MOST, MOST_SYNCED, WINDOW, Prefetch

Start = Callable[..., Worker]
Wait = Callable[..., None]


class Finished:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> int:
        return self.count


def test_a_fixed_prefetch_never_changes() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, 5, finished, clock)
    finished.count = 100_000
    clock.set(1.0)
    assert prefetch.capacity() == 15


def test_the_default_prefetch_follows_the_finishing_rate() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, None, finished, clock)
    assert prefetch.capacity() == 10  # nothing finished yet: free slots only
    finished.count = 500
    clock.set(0.1)  # 5,000 tasks/s
    assert prefetch.capacity() == 10 + int(5_000 * HORIZON)
    finished.count = 500 + 100_000
    clock.set(0.2)  # 1M tasks/s: capped
    assert prefetch.capacity() == 10 + MOST


def test_slow_tasks_are_not_prefetched() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, None, finished, clock)
    finished.count = 10
    clock.set(1.0)  # 10 tasks/s: 0.1 task per horizon
    assert prefetch.capacity() == 10


def test_the_rate_is_read_once_per_window() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, None, finished, clock)
    finished.count = 1_000
    clock.set(WINDOW / 2)
    assert prefetch.capacity() == 10  # too soon: the last allowance
    clock.set(WINDOW)
    assert prefetch.capacity() == 10 + min(MOST, int(1_000 / WINDOW * HORIZON))


def test_a_default_worker_holds_no_slow_task_beyond_its_slots(
    live_app: Conveyor, start_worker: Start, wait_until: Wait
) -> None:
    gate = threading.Event()

    @live_app.task
    def slow() -> None:
        gate.wait(10)

    for _ in range(20):
        slow.enqueue()
    start_worker(concurrency=2)
    try:
        wait_until(lambda: live_app.stats()["default"]["active"] == 2, what="two tasks running")
        assert live_app.stats()["default"]["pending"] == 18  # no prefetch: another worker may take them
    finally:
        gate.set()
    wait_until(lambda: live_app.stats()["default"]["completed"] == 20, what="all done")


def test_a_broker_whose_commits_sync_gets_a_higher_cap() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, None, finished, clock, most=MOST_SYNCED)
    finished.count = 1_000_000
    clock.set(1.0)  # 1M tasks/s: capped, higher than MOST
    assert MOST_SYNCED > MOST
    assert prefetch.capacity() == 10 + MOST_SYNCED
