"""``expires`` (not started in time → archived expired) and ``retention`` (finished tasks vanish)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from conveyor import ArchiveReason, BrokerPolicy, Conveyor, FakeClock, TaskNotFound, TaskState, Worker
from conveyor.model import NewTask

if TYPE_CHECKING:
    from conformance.conftest import AppFactory, Events

WEEK = 7 * 24 * 3600.0


@pytest.fixture
def echo(app: Conveyor) -> str:
    @app.task
    def echo(value: int) -> int:
        return value

    return echo.name


def test_task_not_started_by_its_expiry_is_archived_expired_instead_of_running(
    app: Conveyor, clock: FakeClock, worker: Worker
) -> None:
    ran: list[int] = []

    @app.task
    def job() -> None:
        ran.append(1)

    handle = job.with_options(expires=5).enqueue()
    clock.advance(5)
    worker.run_until_idle()
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, ran) == (TaskState.ARCHIVED, ArchiveReason.EXPIRED, [])


def test_task_started_before_its_expiry_runs(app: Conveyor, clock: FakeClock, worker: Worker, echo: str) -> None:
    handle = app.enqueue(echo, args=[1], expires=5)
    clock.advance(4.9)
    worker.process_next()
    assert app.get(handle.id).state is TaskState.COMPLETED


def test_expires_accepts_an_aware_datetime(app: Conveyor, clock: FakeClock, worker: Worker, echo: str) -> None:
    deadline = datetime.fromtimestamp(clock.now() + 30, UTC)
    handle = app.enqueue(echo, args=[1], expires=deadline)
    assert app.get(handle.id).expires_at == clock.now() + 30
    clock.advance(30)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.EXPIRED


def test_scheduled_task_past_its_expiry_is_archived_expired(
    app: Conveyor, clock: FakeClock, worker: Worker, echo: str
) -> None:
    handle = app.enqueue(echo, args=[1], delay=60, expires=30)
    clock.advance(60)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.EXPIRED


def test_janitor_archives_an_expired_task_without_a_worker(app: Conveyor, clock: FakeClock, echo: str) -> None:
    handle = app.enqueue(echo, args=[1], expires=5)
    clock.advance(5)
    app.broker.reap(clock.now())
    assert app.get(handle.id).archive_reason is ArchiveReason.EXPIRED


def test_completed_task_stays_readable_for_its_retention(
    app: Conveyor, clock: FakeClock, worker: Worker, echo: str
) -> None:
    handle = app.enqueue(echo, args=[7])
    worker.process_next()
    clock.advance(3599.5)
    info = app.get(handle.id)
    assert (info.state, info.result) == (TaskState.COMPLETED, 7)


def test_completed_task_is_gone_once_its_retention_passed_even_before_the_janitor(
    app: Conveyor, clock: FakeClock, worker: Worker, echo: str
) -> None:
    handle = app.enqueue(echo, args=[7])
    worker.process_next()
    clock.advance(3600)
    with pytest.raises(TaskNotFound):
        app.get(handle.id)
    assert app.inspect.list("default", TaskState.COMPLETED) == []
    assert app.stats()["default"]["completed"] == 0


def test_registered_retention_sets_how_long_a_completed_task_stays(
    app: Conveyor, clock: FakeClock, worker: Worker
) -> None:
    @app.task(retention=60.0)
    def brief() -> None: ...

    handle = brief.enqueue()
    worker.process_next()
    clock.advance(59.9)
    assert app.get(handle.id).state is TaskState.COMPLETED
    clock.advance(0.1)
    with pytest.raises(TaskNotFound):
        handle.status()


def test_task_completed_without_retention_is_deleted_by_its_settle(
    app: Conveyor, clock: FakeClock, worker: Worker, events: Events
) -> None:
    @app.task(retention=0.0)
    def fleeting() -> None: ...

    handle = fleeting.enqueue()
    kept = fleeting.with_options(retention=1.0).enqueue()
    assert worker.process_next() and worker.process_next()
    with pytest.raises(TaskNotFound):
        handle.status()
    assert app.get(kept.id).state is TaskState.COMPLETED
    assert app.stats()["default"]["completed"] == 1
    # reported completed, never deleted; gone from the store: the janitor finds only the kept task, later
    expected = [(None, "pending"), ("pending", "active"), ("active", "completed")]
    assert events.wait_for(handle.id, expected) == expected
    assert app.broker.clean(clock.now()) == 0
    clock.advance(1)
    assert app.broker.clean(clock.now()) == 1
    assert events.of(handle.id) == expected
    # its id is free at once, as any id past its retention
    assert fleeting.with_options(task_id=handle.id).enqueue().status().state is TaskState.PENDING


def test_archived_task_stays_readable_seven_days_by_default(app: Conveyor, clock: FakeClock, echo: str) -> None:
    handle = app.enqueue(echo, args=[1])
    app.inspect.archive(handle.id)
    clock.advance(WEEK - 1)
    assert app.get(handle.id).state is TaskState.ARCHIVED
    clock.advance(1)
    with pytest.raises(TaskNotFound):
        app.get(handle.id)


def test_archived_retention_follows_the_broker_policy(make_app: AppFactory, clock: FakeClock) -> None:
    app = make_app(policy=BrokerPolicy(archive_retention=60.0))
    handle = app.enqueue("anything")
    app.inspect.archive(handle.id)
    clock.advance(60)
    with pytest.raises(TaskNotFound):
        app.get(handle.id)


def test_janitor_deletes_tasks_past_their_retention(app: Conveyor, clock: FakeClock, worker: Worker, echo: str) -> None:
    done = app.enqueue(echo, args=[1])
    worker.process_next()
    kept = app.enqueue(echo, args=[2])
    clock.advance(3600)
    assert app.broker.clean(clock.now()) == 1
    assert app.broker.clean(clock.now()) == 0
    with pytest.raises(TaskNotFound):
        app.get(done.id)
    assert app.get(kept.id).state is TaskState.PENDING
    assert app.stats()["default"]["total"] == 1


def test_janitor_keeps_at_most_max_archived_per_queue_dropping_the_oldest(
    make_app: AppFactory, clock: FakeClock
) -> None:
    app = make_app(policy=BrokerPolicy(max_archived=2))
    handles = [app.enqueue("anything", args=[n]) for n in range(3)]
    for handle in handles:
        clock.advance(1)
        app.inspect.archive(handle.id)
    app.broker.clean(clock.now())
    with pytest.raises(TaskNotFound):
        app.get(handles[0].id)
    assert [app.get(h.id).state for h in handles[1:]] == [TaskState.ARCHIVED, TaskState.ARCHIVED]


def test_task_id_of_a_task_past_its_retention_can_be_used_again(
    app: Conveyor, clock: FakeClock, worker: Worker, echo: str
) -> None:
    app.enqueue(echo, args=[1], task_id="nightly")
    worker.process_next()
    clock.advance(3600)
    app.enqueue(echo, args=[2], task_id="nightly")
    info = app.get("nightly")
    assert (info.state, info.args) == (TaskState.PENDING, [2])


def test_enqueue_leaves_other_tasks_past_their_retention_to_the_janitor(make_app: AppFactory, clock: FakeClock) -> None:
    app = make_app(policy=BrokerPolicy(archive_retention=40.0))
    first = app.enqueue("anything", task_id="t0")
    app.inspect.archive(app.enqueue("anything", task_id="t1").id)
    clock.advance(45)
    assert app.broker.enqueue([_new("t0")], clock.now()) == ["t0"]  # t0 still pending: a duplicate
    app.enqueue("anything", task_id="t2")
    assert app.broker.clean(clock.now(), limit=1) == 1  # t1, left by both enqueues
    assert app.broker.clean(clock.now()) == 0
    assert app.get(first.id).state is TaskState.PENDING


def test_enqueue_of_a_batch_replaces_a_task_past_its_retention_only_under_its_own_id(
    make_app: AppFactory, clock: FakeClock
) -> None:
    app = make_app(policy=BrokerPolicy(archive_retention=40.0))
    for task_id in ("t1", "t2"):
        app.inspect.archive(app.enqueue("anything", task_id=task_id).id)
    clock.advance(45)
    assert app.broker.enqueue([_new("t1"), _new("t3")], clock.now()) == [None, None]
    assert app.get("t1").state is TaskState.PENDING
    assert app.broker.clean(clock.now()) == 1  # t2
    with pytest.raises(TaskNotFound):
        app.get("t2")


def _new(task_id: str) -> NewTask:
    return NewTask(task_id, "anything", "default", "[[], {}]")
