"""``app.on_state_change``: every transition reported; a raising callback never breaks the queue.

Backends shared by several processes may deliver events asynchronously, so tests wait for the
expected sequence with a deadline.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from conveyor import Conveyor, FakeClock, TaskState, Worker
from conveyor.testing import poll_until

if TYPE_CHECKING:
    from conformance.conftest import Events


@pytest.fixture
def flaky_once(app: Conveyor) -> str:
    calls: list[int] = []

    @app.task
    def flaky_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first")

    return flaky_once.name


@pytest.fixture
def noop(app: Conveyor) -> str:
    @app.task
    def noop() -> None: ...

    return noop.name


def test_enqueue_reports_none_to_pending(app: Conveyor, events: Events, noop: str) -> None:
    task_id = app.enqueue(noop).id
    assert events.wait_for(task_id, [(None, "pending")]) == [(None, "pending")]


def test_a_successful_run_reports_pending_active_completed(
    app: Conveyor, worker: Worker, events: Events, noop: str
) -> None:
    task_id = app.enqueue(noop).id
    worker.process_next()
    expected = [(None, "pending"), ("pending", "active"), ("active", "completed")]
    assert events.wait_for(task_id, expected) == expected


def test_a_delayed_retried_task_reports_every_transition(
    app: Conveyor, clock: FakeClock, worker: Worker, events: Events, flaky_once: str
) -> None:
    task_id = app.enqueue(flaky_once, delay=5).id
    clock.advance(5)
    worker.process_next()
    clock.advance(1)
    worker.process_next()
    expected = [
        (None, "scheduled"),
        ("scheduled", "pending"),
        ("pending", "active"),
        ("active", "retry"),
        ("retry", "pending"),
        ("pending", "active"),
        ("active", "completed"),
    ]
    assert events.wait_for(task_id, expected) == expected


def test_admin_actions_report_their_transitions(app: Conveyor, events: Events, noop: str) -> None:
    task_id = app.enqueue(noop).id
    app.inspect.archive(task_id)
    app.inspect.run_now(task_id)
    app.inspect.delete(task_id)
    expected = [(None, "pending"), ("pending", "archived"), ("archived", "pending"), ("pending", "deleted")]
    assert events.wait_for(task_id, expected) == expected


def test_purge_reports_each_deletion(app: Conveyor, events: Events, noop: str) -> None:
    ids = [app.enqueue(noop).id for _ in range(2)]
    app.inspect.purge("default", TaskState.PENDING)
    for task_id in ids:
        assert events.wait_for(task_id, [(None, "pending"), ("pending", "deleted")])[-1] == ("pending", "deleted")


def test_lease_expiry_reports_active_to_pending(app: Conveyor, clock: FakeClock, events: Events) -> None:
    task_id = app.enqueue("external").id
    assert app.claim(lease_for=5) is not None
    clock.advance(5)
    app.broker.reap(clock.now())
    expected = [(None, "pending"), ("pending", "active"), ("active", "pending")]
    assert events.wait_for(task_id, expected) == expected


def test_unsubscribed_callback_is_not_called_again(app: Conveyor, events: Events, noop: str) -> None:
    first = app.enqueue(noop).id
    events.wait_for(first, [(None, "pending")])
    events.unsubscribe()
    second = app.enqueue(noop).id
    still_subscribed: list[str] = []
    app.on_state_change(lambda task_id, old, new: still_subscribed.append(task_id))
    last = app.enqueue(noop).id
    poll_until(lambda: last in still_subscribed, message="the last event")  # delivery caught up past `second`
    assert events.of(second) == []


def test_a_raising_callback_is_logged_and_the_queue_keeps_working(
    app: Conveyor,
    worker: Worker,
    events: Events,
    noop: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(task_id: str, old: str | None, new: str) -> None:
        raise RuntimeError("callback bug")

    app.on_state_change(broken)
    with caplog.at_level(logging.ERROR, logger="conveyor"):
        task_id = app.enqueue(noop).id
        assert worker.process_next()
        expected = [(None, "pending"), ("pending", "active"), ("active", "completed")]
        assert events.wait_for(task_id, expected) == expected
        poll_until(lambda: any(_raised_callback_bug(r) for r in caplog.records), message="the callback's error logged")
    assert app.get(task_id).state is TaskState.COMPLETED


def _raised_callback_bug(record: logging.LogRecord) -> bool:
    return record.exc_info is not None and str(record.exc_info[1]) == "callback bug"
