"""The prefetch allowance: fixed, or as many tasks as the slots finish in ``HORIZON`` at their recent speed."""

from __future__ import annotations

import threading
from collections.abc import Callable

from conveyor import Conveyor, FakeClock, Worker
from conveyor.testing import poll_until
from conveyor.worker.prefetch import HORIZON, MOST, MOST_SYNCED, WINDOW, Prefetch

Start = Callable[..., Worker]


class Finished:
    """What the pool finished: a count, and the seconds those tasks held their slots."""

    def __init__(self) -> None:
        self.count = 0
        self.busy = 0.0

    def __call__(self) -> int:
        return self.count

    def run(self, tasks: int, each: float) -> None:
        self.count += tasks
        self.busy += tasks * each


def _prefetch(finished: Finished, clock: FakeClock, fixed: int | None = None) -> Prefetch:
    return Prefetch(10, fixed, finished, lambda: finished.busy, clock)


def test_a_fixed_prefetch_never_changes() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock, 5)
    finished.run(100_000, 0.0001)
    clock.set(1.0)
    assert prefetch.capacity() == 15


def test_the_default_prefetch_follows_the_speed_of_the_slots() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock)
    assert prefetch.capacity() == 10  # nothing finished yet: free slots only
    finished.run(50, 0.005)  # 10 slots at 5 ms a task: 2,000 tasks/s
    clock.set(0.1)
    assert prefetch.capacity() == 10 + int(2_000 * HORIZON)
    finished.run(10, 0.000_01)  # 1M tasks/s: capped
    clock.set(0.2)
    assert prefetch.capacity() == 10 + MOST


def test_a_worker_starved_of_short_tasks_still_claims_them_in_large_batches() -> None:
    """Its finishing rate is what its claims bring (several workers on one file: a share each), not what
    its slots could run: the allowance must not shrink with it."""
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock)
    finished.run(100, 0.000_03)  # 1,000 tasks/s finished, 30 µs each
    clock.set(0.1)
    assert prefetch.capacity() == 10 + MOST


def test_slow_tasks_are_not_prefetched() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock)
    finished.run(10, 1.0)
    clock.set(1.0)  # 10 slots at 1 s a task: 0.1 task per horizon
    assert prefetch.capacity() == 10


def test_an_idle_worker_prefetches_nothing() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock)
    finished.run(1_000, 0.000_01)
    clock.set(0.1)
    assert prefetch.capacity() == 10 + MOST
    clock.set(0.2)  # nothing finished in this window
    assert prefetch.capacity() == 10


def test_the_speed_is_read_once_per_window() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = _prefetch(finished, clock)
    finished.run(100, 0.002)
    clock.set(WINDOW / 2)
    assert prefetch.capacity() == 10  # too soon: the last allowance
    clock.set(WINDOW)
    assert prefetch.capacity() == 10 + min(MOST, int(10 / 0.002 * HORIZON))


def test_a_default_worker_holds_no_slow_task_beyond_its_slots(live_app: Conveyor, start_worker: Start) -> None:
    gate = threading.Event()

    @live_app.task
    def slow() -> None:
        gate.wait(10)

    for _ in range(20):
        slow.enqueue()
    start_worker(concurrency=2)
    try:
        poll_until(lambda: live_app.stats()["default"]["active"] == 2, message="two tasks running")
        assert live_app.stats()["default"]["pending"] == 18  # no prefetch: another worker may take them
    finally:
        gate.set()
    poll_until(lambda: live_app.stats()["default"]["completed"] == 20, message="all done")


def test_a_broker_whose_commits_sync_gets_a_higher_cap() -> None:
    finished, clock = Finished(), FakeClock(0.0)
    prefetch = Prefetch(10, None, finished, lambda: finished.busy, clock, most=MOST_SYNCED)
    finished.run(1_000_000, 0.000_01)
    clock.set(1.0)  # 1M tasks/s: capped, higher than MOST
    assert MOST_SYNCED > MOST
    assert prefetch.capacity() == 10 + MOST_SYNCED
