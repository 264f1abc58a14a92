"""The task transitions of the memory and SQLite brokers, written once: pure functions of a record.

Each rule returns a :data:`Change`, the new values of the columns the transition sets: ``TaskRecord``
field names, plus :data:`READY_AT` where the task becomes pending (when it became ready, which orders
it among pending tasks; the memory broker keeps it beside the record, SQLite in a column). A change
is a fresh dict, so the broker applying it may take ``READY_AT`` out of it. The memory broker applies
a change with one ``dataclasses.replace`` and re-indexes the task; SQLite writes the new record as one
row, and builds its batch completion ``UPDATE`` from :func:`completed` once, at import, so the hot
path builds no record at all. The brokers only find, index and store rows.

The operator actions (``run_now``, ``archive``, ``cancel``, ``delete``) accept a task in the states
:data:`ADMIN_SOURCES` names and refuse any other with :func:`refusal`, the same words on every broker
(Redis maps its scripts' refusals through it too).

Redis keeps its own code in Lua (``brokers/redis/lua``); the texts it shares with this module
(:data:`EXPIRED_ERROR`, :data:`RETRY_ERROR`, :data:`LEASE_EXPIRED_ERROR`) are checked against
``_states.lua`` by ``tests/brokers/test_transitions.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conveyor.brokers.base import CANCELLABLE, MAX_ERRORS_KEPT, records_limit
from conveyor.errors import InvalidTransition
from conveyor.model import ArchiveReason, BrokerPolicy, ErrorEntry, Outcome, TaskRecord, TaskState

__all__ = [
    "ADMIN_SOURCES",
    "EXPIRED_ERROR",
    "LEASE_EXPIRED_ERROR",
    "READY_AT",
    "RETRY_ERROR",
    "Change",
    "archived",
    "cancelled",
    "check_delete",
    "claimed",
    "completed",
    "deleted_at_settle",
    "due_after",
    "empty_counts",
    "expired",
    "extended",
    "kept_until",
    "manually_archived",
    "promoted",
    "reaped",
    "refusal",
    "released",
    "retried",
    "run_now",
    "settled",
    "with_error",
]

_S = TaskState

#: Column name -> new value (``TaskRecord`` fields, and :data:`READY_AT`).
Change = dict[str, Any]

#: The key of a change that makes a task pending: when it became ready (not a ``TaskRecord`` field).
READY_AT = "ready_at"

#: The error of a task archived ``expired``: its ``expires_at`` passed while it waited.
EXPIRED_ERROR = "Expired: its deadline passed before it could run (again)"
#: The error a retry records when the outcome gave none.
RETRY_ERROR = "Retry"
#: The error of an expired lease (``{stalls}``: the task's stall count, this one included).
LEASE_EXPIRED_ERROR = "LeaseExpired: lease expired without an acknowledgement ({stalls} stall(s))"

#: What every operator action accepts a task in; any other state is refused with :func:`refusal`.
ADMIN_SOURCES: dict[str, frozenset[TaskState]] = {
    "run_now": frozenset({_S.SCHEDULED, _S.RETRY, _S.ARCHIVED}),
    "archive": frozenset({_S.SCHEDULED, _S.PENDING, _S.RETRY}),
    "cancel": CANCELLABLE,
    "delete": frozenset(TaskState) - {_S.ACTIVE},
}
_REFUSALS = {
    "run_now": "cannot run {state} task {task_id!r} now",
    "archive": "cannot archive {state} task {task_id!r}",
    "cancel": "cannot cancel {state} task {task_id!r}",
    "delete": "cannot delete {state} task {task_id!r}; cancel it first",
}


def with_error(errors: Iterable[ErrorEntry], entry: ErrorEntry) -> tuple[ErrorEntry, ...]:
    """``errors`` with ``entry`` appended, the oldest dropped beyond ``MAX_ERRORS_KEPT``."""
    return (*errors, entry)[-MAX_ERRORS_KEPT:]


def empty_counts() -> dict[str, int]:
    """A queue's ``QueueInfo.counts`` before any task: every state and ``total`` at 0."""
    counts = {state.value: 0 for state in TaskState}
    counts["total"] = 0
    return counts


# -- the lifecycle -----------------------------------------------------------------------------


def claimed(rec: TaskRecord, now: float, token: str, lease_until: float) -> Change:
    """pending -> active: a new attempt under lease ``token`` until ``lease_until``."""
    return {
        "state": _S.ACTIVE,
        "attempts": rec.attempts + 1,
        "started_at": now,
        "lease_token": token,
        "lease_expires_at": lease_until,
        "cancel_requested": False,
    }


def extended(lease_until: float) -> Change:
    """An active task's lease, now held until ``lease_until``."""
    return {"lease_expires_at": lease_until}


def _pending(ready_at: float) -> Change:
    """-> pending, ready since ``ready_at`` (no schedule, no lease)."""
    return {"state": _S.PENDING, "next_run_at": None, "lease_token": None, "lease_expires_at": None, READY_AT: ready_at}


def promoted(rec: TaskRecord) -> Change:
    """scheduled | retry -> pending, ready since it was due (so it keeps its place when promoted late)."""
    assert rec.next_run_at is not None
    return _pending(rec.next_run_at)


def _failure(rec: TaskRecord, now: float, error: str) -> Change:
    """The columns that record ``error`` as the failure of ``rec``'s latest attempt."""
    return {"last_error": error, "errors": with_error(rec.errors, ErrorEntry(rec.attempts, now, error))}


def _finished(state: TaskState, now: float, keep_until: float) -> Change:
    return {
        "state": state,
        "finished_at": now,
        "keep_until": keep_until,
        "next_run_at": None,
        "lease_token": None,
        "lease_expires_at": None,
        "cancel_requested": False,
    }


def completed(now: float, keep_until: float, result: str | None) -> Change:
    """active -> completed with ``result``, readable until ``keep_until``."""
    change = _finished(_S.COMPLETED, now, keep_until)
    change["result"] = result
    change["last_error"] = None
    return change


def kept_until(outcome: Outcome, now: float, policy: BrokerPolicy) -> float:
    """Until when a completion by ``outcome`` stays readable."""
    return now + (policy.archive_retention if outcome.keep_for is None else outcome.keep_for)


def deleted_at_settle(keep_until: float, now: float) -> bool:
    """Whether a task completed ``now``, readable until ``keep_until``, is deleted by the settle itself.

    Without retention it is unreadable at once, and ``clean`` would delete it later, unreported: the
    settle deletes it instead (it still reports the transition to ``completed``, never a deletion), so
    the store never holds it and ``clean`` finds nothing of it left.
    """
    return keep_until <= now


def archived(
    rec: TaskRecord, reason: ArchiveReason, now: float, policy: BrokerPolicy, error: str | None = None
) -> Change:
    """-> archived with ``reason`` for ``policy.archive_retention``; ``error`` (if any) recorded."""
    change = _finished(_S.ARCHIVED, now, now + policy.archive_retention)
    change["archive_reason"] = reason
    if error is not None:
        change.update(_failure(rec, now, error))
    return change


def retried(rec: TaskRecord, now: float, run_at: float | None, error: str | None) -> Change:
    """active -> retry at ``run_at`` (None: now), one more retry used, the error recorded."""
    return {
        "state": _S.RETRY,
        "retries": rec.retries + 1,
        "next_run_at": run_at if run_at is not None else now,
        "lease_token": None,
        "lease_expires_at": None,
        "cancel_requested": False,
        **_failure(rec, now, error or RETRY_ERROR),
    }


def due_after(run_at: float | None, now: float) -> float | None:
    """When a task made pending or scheduled at ``now`` falls due: ``run_at`` if it is later (the task
    is scheduled), else None (it is pending at once)."""
    return run_at if run_at is not None and run_at > now else None


def released(rec: TaskRecord, now: float, run_at: float | None, error: str | None) -> Change:
    """active -> pending (or scheduled if ``run_at`` is later), the attempt given back."""
    if due_after(run_at, now) is not None:
        change: Change = {"state": _S.SCHEDULED, "next_run_at": run_at, "lease_token": None, "lease_expires_at": None}
    else:
        change = _pending(now)
    change["attempts"] = max(0, rec.attempts - 1)
    change["cancel_requested"] = False
    if error is not None:
        change["last_error"] = error
    return change


def settled(rec: TaskRecord, outcome: Outcome, now: float, policy: BrokerPolicy) -> Change:
    """What ``outcome`` does to active ``rec`` (its lease already checked); ValueError for an unknown kind."""
    kind = outcome.kind
    if kind == "complete":
        return completed(now, kept_until(outcome, now, policy), outcome.result)
    if kind == "retry":
        change = retried(rec, now, outcome.run_at, outcome.error)
    elif kind == "archive":
        change = archived(rec, outcome.reason or ArchiveReason.FAILED, now, policy, outcome.error)
    elif kind == "release":
        return released(rec, now, outcome.run_at, outcome.error)
    else:
        raise ValueError(f"unknown outcome kind {kind!r}")
    if records_limit(outcome):
        change["traceback"] = outcome.traceback
        if outcome.max_retries is not None:
            change["max_retries"] = outcome.max_retries
    return change


def reaped(rec: TaskRecord, now: float, policy: BrokerPolicy) -> Change:
    """An active task whose lease expired: one more stall; pending again (ready since the lease
    expired), or archived ``poison`` at ``policy.max_stalls``."""
    stalls = rec.stalls + 1
    error = LEASE_EXPIRED_ERROR.format(stalls=stalls)
    if stalls >= policy.max_stalls:
        change = archived(rec, ArchiveReason.POISON, now, policy, error)
    else:
        assert rec.lease_expires_at is not None
        change = _pending(rec.lease_expires_at)
        change.update(_failure(rec, now, error))
    change["stalls"] = stalls
    return change


def expired(rec: TaskRecord, now: float, policy: BrokerPolicy) -> Change:
    """A waiting task whose ``expires_at`` passed -> archived ``expired``."""
    return archived(rec, ArchiveReason.EXPIRED, now, policy, EXPIRED_ERROR)


# -- operator actions --------------------------------------------------------------------------


def refusal(action: str, state: str, task_id: str) -> InvalidTransition:
    """The error of operator ``action`` (a key of :data:`ADMIN_SOURCES`) on a task in ``state``."""
    return InvalidTransition(_REFUSALS[action].format(state=state, task_id=task_id))


def _admit(action: str, rec: TaskRecord) -> None:
    if rec.state not in ADMIN_SOURCES[action]:
        raise refusal(action, rec.state.value, rec.id)


def run_now(rec: TaskRecord, now: float) -> Change:
    """scheduled | retry -> pending now; archived -> pending now with its retries, stalls and archive
    fields reset (a fresh budget). An expiry already past is lifted: the operator's "run it now"
    overrides it (kept, it would archive the task ``expired`` again at its next claim)."""
    _admit("run_now", rec)
    change = _pending(now)
    if rec.state is _S.ARCHIVED:
        change.update(retries=0, stalls=0, archive_reason=None, finished_at=None, keep_until=None)
    if rec.expires_at is not None and rec.expires_at <= now:
        change["expires_at"] = None
    return change


def manually_archived(rec: TaskRecord, now: float, policy: BrokerPolicy) -> Change:
    """The operator's ``archive``: a waiting task -> archived ``manual``."""
    _admit("archive", rec)
    return archived(rec, ArchiveReason.MANUAL, now, policy)


def cancelled(rec: TaskRecord, now: float, policy: BrokerPolicy) -> Change:
    """The operator's ``cancel``: an unfinished task (an active one too, its lease revoked) -> archived
    ``cancelled``."""
    _admit("cancel", rec)
    return archived(rec, ArchiveReason.CANCELLED, now, policy)


def check_delete(rec: TaskRecord) -> None:
    """Refuses the operator's ``delete`` of an active task (it must be cancelled first)."""
    _admit("delete", rec)
