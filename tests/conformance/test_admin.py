"""The Inspector: listing with paging, run_now, archive, delete, cancel, purge."""

from __future__ import annotations

import pytest

from conveyor import (
    ArchiveReason,
    Conveyor,
    FakeClock,
    InvalidTransition,
    LeaseLost,
    TaskContext,
    TaskNotFound,
    TaskState,
    Worker,
    current_task,
)
from conveyor.model import Outcome


@pytest.fixture
def noop(app: Conveyor) -> str:
    @app.task
    def noop(n: int = 0) -> int:
        return n

    return noop.name


def test_list_returns_a_queues_tasks_in_one_state(app: Conveyor, noop: str) -> None:
    pending = [app.enqueue(noop, args=[n]).id for n in range(3)]
    app.enqueue(noop, delay=10)
    app.enqueue(noop, queue="other")
    assert [info.id for info in app.inspect.list("default", TaskState.PENDING)] == pending
    assert len(app.inspect.list("default", "scheduled")) == 1


def test_list_pages_with_offset_and_limit(app: Conveyor, noop: str) -> None:
    ids = [app.enqueue(noop, args=[n]).id for n in range(7)]
    pages = [[info.id for info in app.inspect.list("default", "pending", offset=o, limit=3)] for o in (0, 3, 6, 9)]
    assert pages == [ids[0:3], ids[3:6], ids[6:7], []]


def test_list_of_pending_tasks_is_in_claim_order(app: Conveyor, noop: str) -> None:
    low = app.enqueue(noop, priority=0).id
    high = app.enqueue(noop, priority=5).id
    assert [info.id for info in app.inspect.list("default", "pending")] == [high, low]


def test_list_of_finished_tasks_is_newest_first(app: Conveyor, clock: FakeClock, worker: Worker, noop: str) -> None:
    ids = [app.enqueue(noop, args=[n]).id for n in range(3)]
    for _ in ids:
        clock.advance(1)
        worker.process_next()
    assert [info.id for info in app.inspect.list("default", "completed")] == ids[::-1]


def test_run_now_makes_a_scheduled_task_pending(app: Conveyor, worker: Worker, noop: str) -> None:
    handle = app.enqueue(noop, delay=3600)
    app.inspect.run_now(handle.id)
    assert app.get(handle.id).state is TaskState.PENDING
    assert worker.process_next()


def test_run_now_makes_a_retrying_task_pending(app: Conveyor, worker: Worker) -> None:
    @app.task
    def flaky() -> None:
        raise RuntimeError("x")

    handle = flaky.enqueue()
    worker.process_next()
    app.inspect.run_now(handle.id)
    assert app.get(handle.id).state is TaskState.PENDING


def test_run_now_revives_an_archived_task_with_its_retries_back(
    app: Conveyor, clock: FakeClock, worker: Worker
) -> None:
    @app.task(max_retries=1)
    def flaky() -> None:
        raise RuntimeError("x")

    handle = flaky.enqueue()
    worker.process_next()
    clock.advance(1)
    worker.process_next()
    assert (app.get(handle.id).state, app.get(handle.id).retries_left) == (TaskState.ARCHIVED, 0)
    app.inspect.run_now(handle.id)
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.retries_left) == (TaskState.PENDING, None, 1)


def test_run_now_of_an_expired_task_runs_it(app: Conveyor, clock: FakeClock, worker: Worker, noop: str) -> None:
    """Its expiry past, it was made pending and then archived ``expired`` again at the next claim: the
    operator's "run it now" lifts an expiry already past (one still ahead is kept)."""
    archived = app.enqueue(noop, args=[1], expires=10).id
    waiting = app.enqueue(noop, args=[2], delay=30, expires=20).id
    later = app.enqueue(noop, args=[3], delay=30, expires=3600).id
    clock.advance(15)
    worker.process_next()  # runs nothing: the claim archives the first as expired
    assert app.get(archived).archive_reason is ArchiveReason.EXPIRED
    clock.advance(10)
    for task_id in (archived, waiting, later):
        app.inspect.run_now(task_id)
    assert [app.get(task_id).expires_at for task_id in (archived, waiting)] == [None, None]
    assert app.get(later).expires_at == clock.now() - 25 + 3600
    while worker.process_next():
        pass
    assert [(app.get(i).state, app.get(i).result) for i in (archived, waiting, later)] == [
        (TaskState.COMPLETED, 1),
        (TaskState.COMPLETED, 2),
        (TaskState.COMPLETED, 3),
    ]


@pytest.mark.parametrize("make_state", ["pending", "completed"])
def test_run_now_of_a_pending_or_completed_task_is_an_invalid_transition(
    app: Conveyor, worker: Worker, noop: str, make_state: str
) -> None:
    handle = app.enqueue(noop)
    if make_state == "completed":
        worker.process_next()
    with pytest.raises(InvalidTransition):
        app.inspect.run_now(handle.id)


@pytest.mark.parametrize("delay", [None, 60.0], ids=["pending", "scheduled"])
def test_archive_moves_a_waiting_task_to_archived_manual(app: Conveyor, noop: str, delay: float | None) -> None:
    handle = app.enqueue(noop, delay=delay)
    app.inspect.archive(handle.id)
    info = app.get(handle.id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.MANUAL)


def test_archive_of_a_completed_task_is_an_invalid_transition(app: Conveyor, worker: Worker, noop: str) -> None:
    handle = app.enqueue(noop)
    worker.process_next()
    with pytest.raises(InvalidTransition):
        app.inspect.archive(handle.id)


def test_delete_removes_the_task(app: Conveyor, noop: str) -> None:
    handle = app.enqueue(noop)
    app.inspect.delete(handle.id)
    with pytest.raises(TaskNotFound):
        app.get(handle.id)
    assert app.stats()["default"]["total"] == 0


def test_delete_of_an_active_task_is_an_invalid_transition(app: Conveyor, noop: str) -> None:
    handle = app.enqueue(noop)
    assert app.claim() is not None
    with pytest.raises(InvalidTransition):
        app.inspect.delete(handle.id)
    assert app.get(handle.id).state is TaskState.ACTIVE


@pytest.mark.parametrize("delay", [None, 60.0], ids=["pending", "scheduled"])
def test_cancel_of_a_waiting_task_archives_it_cancelled(app: Conveyor, noop: str, delay: float | None) -> None:
    handle = app.enqueue(noop, delay=delay)
    assert app.inspect.cancel(handle.id) is TaskState.ARCHIVED
    info = app.get(handle.id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED)


def test_handle_cancel_cancels_the_task(app: Conveyor, noop: str) -> None:
    handle = app.enqueue(noop)
    assert handle.cancel() is TaskState.ARCHIVED
    assert app.get(handle.id).archive_reason is ArchiveReason.CANCELLED


def test_cancel_of_a_running_task_archives_it_cancelled_and_revokes_its_lease(app: Conveyor, noop: str) -> None:
    handle = app.enqueue(noop)
    assert app.claim() is not None
    assert app.inspect.cancel(handle.id) is TaskState.ARCHIVED
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.lease_expires_at) == (
        TaskState.ARCHIVED,
        ArchiveReason.CANCELLED,
        None,
    )
    assert app.stats()["default"]["active"] == 0


def test_a_late_outcome_of_a_cancelled_running_task_is_fenced(app: Conveyor, noop: str, clock: FakeClock) -> None:
    """The holder finishes anyway: its completion, retry or release is refused, and so is its
    heartbeat; the task stays archived ``cancelled``."""
    handle = app.enqueue(noop)
    record = app.broker.claim(["default"], app.now(), 30.0)[0]
    assert record.lease_token is not None
    app.inspect.cancel(handle.id)
    clock.advance(1)
    token = record.lease_token
    late = [
        Outcome(handle.id, token, "complete", result="1"),
        Outcome(handle.id, token, "retry", error="boom", run_at=app.now()),
        Outcome(handle.id, token, "release"),
    ]
    assert [app.broker.settle([outcome], app.now())[0] for outcome in late] == [False, False, False]
    assert app.broker.extend(handle.id, token, app.now(), 30.0) is None
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.result) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED, None)
    assert app.broker.claim(["default"], app.now(), 30.0) == []


def test_running_handler_learns_of_its_cancel_from_its_lease(app: Conveyor, worker: Worker) -> None:
    seen: list[tuple[bool, bool, bool, bool]] = []

    @app.task
    def long_job(ctx: TaskContext) -> str:
        before = ctx.cancelled
        app.inspect.cancel(ctx.task_id)  # an operator, while the handler runs
        with pytest.raises(LeaseLost):
            ctx.extend(30)  # the lease is gone: that is how a running handler learns of the cancel
        seen.append((before, ctx.cancelled, ctx.lease_lost, current_task().should_stop()))
        return "finished anyway"

    handle = long_job.enqueue()
    worker.process_next()
    assert seen == [(False, True, True, True)]
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.result) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED, None)


def test_cancel_of_a_finished_task_is_an_invalid_transition(app: Conveyor, worker: Worker, noop: str) -> None:
    handle = app.enqueue(noop)
    worker.process_next()
    with pytest.raises(InvalidTransition):
        app.inspect.cancel(handle.id)


def test_purge_deletes_every_task_of_a_queue_in_a_state(app: Conveyor, noop: str) -> None:
    for n in range(3):
        app.enqueue(noop, args=[n])
    kept = app.enqueue(noop, delay=60)
    other = app.enqueue(noop, queue="other")
    assert app.inspect.purge("default", TaskState.PENDING) == 3
    assert app.stats()["default"]["total"] == 1
    assert app.get(kept.id).state is TaskState.SCHEDULED
    assert app.get(other.id).state is TaskState.PENDING


def test_purge_with_a_limit_deletes_at_most_that_many(app: Conveyor, noop: str) -> None:
    for n in range(5):
        app.enqueue(noop, args=[n])
    assert app.inspect.purge("default", "pending", limit=2) == 2
    assert app.stats()["default"]["pending"] == 3


def test_purge_of_active_tasks_is_an_invalid_transition(app: Conveyor, noop: str) -> None:
    app.enqueue(noop)
    assert app.claim() is not None
    with pytest.raises(InvalidTransition):
        app.inspect.purge("default", TaskState.ACTIVE)


@pytest.mark.parametrize("action", ["run_now", "archive", "delete", "cancel", "get"])
def test_admin_actions_on_an_unknown_id_raise_task_not_found(app: Conveyor, action: str) -> None:
    with pytest.raises(TaskNotFound):
        getattr(app.inspect, action)("no-such-task")
