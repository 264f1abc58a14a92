"""External consumers: ``app.claim()`` leases, their fencing, reclaiming and poison after stalls."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from conveyor import (
    ArchiveReason,
    BrokerPolicy,
    Conveyor,
    FakeClock,
    Fixed,
    Lease,
    LeaseLost,
    TaskState,
    Worker,
)

if TYPE_CHECKING:
    from conformance.conftest import AppFactory


@pytest.fixture
def review(app: Conveyor) -> str:
    """A task meant for humans: no Python handler runs it, only external consumers claim it."""
    return app.enqueue("review", args=["doc-1"]).id


def _claim(app: Conveyor, lease_for: float = 30.0) -> Lease:
    lease = app.claim(queues=["default"], lease_for=lease_for)
    assert lease is not None
    return lease


def test_claim_returns_none_when_nothing_is_ready(app: Conveyor) -> None:
    app.enqueue("review", delay=10)
    assert app.claim() is None


def test_claim_leases_the_task_active_until_the_lease_expires(app: Conveyor, clock: FakeClock, review: str) -> None:
    lease = _claim(app, lease_for=30)
    assert (lease.task.id, lease.task.state, lease.task.attempts, lease.task.args) == (
        review,
        TaskState.ACTIVE,
        1,
        ["doc-1"],
    )
    info = app.get(review)
    assert (info.state, info.lease_expires_at, info.started_at) == (TaskState.ACTIVE, clock.now() + 30, clock.now())
    assert app.claim() is None


def test_lease_complete_stores_the_result(app: Conveyor, review: str) -> None:
    _claim(app).complete({"approved": True})
    info = app.get(review)
    assert (info.state, info.result, info.last_error) == (TaskState.COMPLETED, {"approved": True}, None)


def test_lease_fail_retries_per_the_tasks_policy(app: Conveyor, clock: FakeClock) -> None:
    handle = app.enqueue("review", backoff=Fixed(60.0))
    _claim(app).fail("reviewer unavailable")
    info = app.get(handle.id)
    assert (info.state, info.next_run_at, info.retries_left) == (TaskState.RETRY, clock.now() + 60, 2)
    assert info.last_error == "reviewer unavailable"


def test_lease_fail_with_an_exception_records_type_and_message(app: Conveyor, review: str) -> None:
    _claim(app).fail(TimeoutError("no answer"))
    assert app.get(review).last_error == "TimeoutError: no answer"


def test_lease_fail_without_retry_archives_permanently(app: Conveyor, review: str) -> None:
    _claim(app).fail("rejected", retry=False)
    info = app.get(review)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.PERMANENT)


def test_lease_fail_with_no_retries_left_archives_as_failed(app: Conveyor) -> None:
    handle = app.enqueue("review", max_retries=0)
    _claim(app).fail("no")
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


def test_lease_release_puts_the_task_back_without_counting_an_attempt(app: Conveyor, review: str) -> None:
    _claim(app).release()
    info = app.get(review)
    assert (info.state, info.attempts, info.retries_left) == (TaskState.PENDING, 0, None)  # no failure recorded
    assert _claim(app).task.id == review


def test_lease_release_with_a_delay_schedules_the_task(app: Conveyor, clock: FakeClock, review: str) -> None:
    _claim(app).release(delay=20)
    info = app.get(review)
    assert (info.state, info.next_run_at) == (TaskState.SCHEDULED, clock.now() + 20)


def test_lease_extend_pushes_the_deadline_from_now(app: Conveyor, clock: FakeClock, review: str) -> None:
    lease = _claim(app, lease_for=10)
    assert lease.expires_at == clock.now() + 10
    clock.advance(8)
    assert lease.extend(10) == clock.now() + 10
    assert lease.expires_at == clock.now() + 10  # it read the claim's deadline still
    clock.advance(8)
    assert app.claim() is None
    lease.complete()
    assert app.get(review).state is TaskState.COMPLETED


def test_expired_lease_makes_the_task_claimable_again_and_the_reclaim_counts_an_attempt(
    app: Conveyor, clock: FakeClock, review: str
) -> None:
    _claim(app, lease_for=10)
    clock.advance(10)
    again = _claim(app)
    assert (again.task.id, again.task.attempts) == (review, 2)


def test_reaper_reclaims_an_expired_lease(app: Conveyor, clock: FakeClock, review: str) -> None:
    _claim(app, lease_for=10)
    clock.advance(10)
    assert app.broker.reap(clock.now()) == 1
    info = app.get(review)
    assert (info.state, info.attempts, info.stalls) == (TaskState.PENDING, 1, 1)


def test_lease_not_yet_expired_is_not_reclaimed(app: Conveyor, clock: FakeClock, review: str) -> None:
    _claim(app, lease_for=10)
    clock.advance(9.9)
    assert app.broker.reap(clock.now()) == 0
    assert app.claim() is None


@pytest.mark.parametrize("call", ["complete", "fail", "release", "extend"])
def test_fenced_old_lease_raises_lease_lost_and_changes_nothing(
    app: Conveyor, clock: FakeClock, review: str, call: str
) -> None:
    old = _claim(app, lease_for=10)
    clock.advance(10)
    current = _claim(app, lease_for=10)
    before = app.get(review)
    calls: dict[str, Callable[[], object]] = {
        "complete": lambda: old.complete("late"),
        "fail": lambda: old.fail("late"),
        "release": lambda: old.release(),
        "extend": lambda: old.extend(60),
    }
    with pytest.raises(LeaseLost):
        calls[call]()
    assert app.get(review) == before
    current.complete("on time")
    assert app.get(review).result == "on time"


def test_settled_lease_cannot_be_used_again(app: Conveyor, review: str) -> None:
    lease = _claim(app)
    lease.complete(1)
    with pytest.raises(LeaseLost):
        lease.complete(2)
    assert app.get(review).result == 1


def test_holder_of_an_expired_lease_not_yet_reclaimed_can_still_settle(
    app: Conveyor, clock: FakeClock, review: str
) -> None:
    lease = _claim(app, lease_for=10)
    clock.advance(15)
    lease.complete("just in time")
    assert app.get(review).state is TaskState.COMPLETED


def test_task_whose_lease_keeps_expiring_is_archived_poison_after_max_stalls(
    make_app: AppFactory, clock: FakeClock
) -> None:
    app = make_app(policy=BrokerPolicy(max_stalls=2))
    handle = app.enqueue("crashy")
    _claim(app, lease_for=5)
    clock.advance(5)
    app.broker.reap(clock.now())
    assert (app.get(handle.id).state, app.get(handle.id).stalls) == (TaskState.PENDING, 1)
    _claim(app, lease_for=5)
    clock.advance(5)
    app.broker.reap(clock.now())
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.stalls) == (TaskState.ARCHIVED, ArchiveReason.POISON, 2)


def test_worker_that_lost_its_lease_does_not_overwrite_the_new_holder(
    app: Conveyor, clock: FakeClock, worker: Worker
) -> None:
    @app.task
    def slow() -> str:
        clock.advance(60)  # the handler outlives the worker's lease; someone else claims the task meanwhile
        assert app.claim() is not None
        return "stale"

    handle = slow.enqueue()
    assert worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.attempts, info.result) == (TaskState.ACTIVE, 2, None)
