"""Ready order: highest priority first, then enqueue order; aging lets low priority catch up."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, Worker


@pytest.fixture
def ran(app: Conveyor) -> list[str]:
    """Labels of ``record`` executions, in the order they ran."""
    order: list[str] = []

    @app.task
    def record(label: str) -> None:
        order.append(label)

    return order


def _enqueue(app: Conveyor, label: str, priority: int = 0, **options: Any) -> None:
    app.enqueue("record", args=[label], priority=priority, **options)


def test_highest_priority_runs_first(app: Conveyor, worker: Worker, ran: list[str]) -> None:
    for label, priority in [("p0", 0), ("p5", 5), ("p-1", -1), ("p3", 3)]:
        _enqueue(app, label, priority)
    worker.run_until_idle()
    assert ran == ["p5", "p3", "p0", "p-1"]


def test_equal_priority_runs_in_enqueue_order(app: Conveyor, worker: Worker, ran: list[str]) -> None:
    labels = [f"t{n}" for n in range(12)]
    for label in labels:
        _enqueue(app, label, 1)
    worker.run_until_idle()
    assert ran == labels


def test_equal_priority_runs_in_enqueue_order_even_when_enqueued_in_the_same_instant(
    app: Conveyor, worker: Worker, ran: list[str]
) -> None:
    handles = app.enqueue_many("record", [([f"b{n}"], {}) for n in range(5)])
    assert len(handles) == 5
    worker.run_until_idle()
    assert ran == [f"b{n}" for n in range(5)]


def test_a_task_not_yet_due_never_runs_before_lower_priority_ready_ones(
    app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]
) -> None:
    _enqueue(app, "urgent-later", 100, delay=10)
    _enqueue(app, "low-now", -5)
    worker.run_until_idle()
    assert ran == ["low-now"]
    clock.advance(10)
    worker.run_until_idle()
    assert ran == ["low-now", "urgent-later"]


def test_retried_task_rejoins_by_priority(app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]) -> None:
    @app.task(max_retries=1)
    def fails_once() -> None:
        ran.append("fails_once")
        if ran.count("fails_once") == 1:
            raise RuntimeError("first")

    app.enqueue("fails_once", priority=9)
    worker.process_next()
    _enqueue(app, "normal", 0)
    clock.advance(1)
    worker.run_until_idle()
    assert ran == ["fails_once", "fails_once", "normal"]


def test_without_aging_a_higher_priority_task_wins_however_long_the_other_waited(
    app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]
) -> None:
    _enqueue(app, "low", 0)
    clock.advance(10_000)
    _enqueue(app, "high", 1)
    worker.run_until_idle()
    assert ran == ["high", "low"]


def test_with_aging_a_starving_low_priority_task_wins(
    app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]
) -> None:
    app.configure_queue("default", aging=10.0)
    _enqueue(app, "low", 0)
    clock.advance(60)  # six priority steps gained
    _enqueue(app, "high", 5)
    worker.run_until_idle()
    assert ran == ["low", "high"]


def test_with_aging_a_wait_shorter_than_the_priority_gap_does_not_win(
    app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]
) -> None:
    app.configure_queue("default", aging=10.0)
    _enqueue(app, "low", 0)
    clock.advance(40)  # four steps: still below 5
    _enqueue(app, "high", 5)
    worker.run_until_idle()
    assert ran == ["high", "low"]


def test_aging_configured_after_enqueue_applies_to_waiting_tasks(
    app: Conveyor, clock: FakeClock, worker: Worker, ran: list[str]
) -> None:
    _enqueue(app, "low", 0)
    clock.advance(100)
    _enqueue(app, "high", 2)
    app.configure_queue("default", aging=10.0)
    worker.run_until_idle()
    assert ran == ["low", "high"]


def test_worker_drains_its_queues_in_the_order_given(app: Conveyor, worker: Worker, ran: list[str]) -> None:
    _enqueue(app, "b-high", 9, queue="b")
    _enqueue(app, "a-low", 0, queue="a")
    app.worker(queues=["a", "b"]).run_until_idle()
    assert ran == ["a-low", "b-high"]
