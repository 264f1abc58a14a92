"""Mapping between ``tasks`` rows and :class:`~conveyor.model.TaskRecord` (plus the row's bookkeeping)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor._frozen import fast_init
from conveyor.brokers.base import ready_key
from conveyor.model import ArchiveReason, ErrorEntry, TaskRecord, TaskState

__all__ = [
    "CLAIMED",
    "COLUMNS",
    "FRESH",
    "SELECT_TASK",
    "UPDATE_TASK",
    "ClaimedRows",
    "Stored",
    "claimed",
    "encode_errors",
    "fresh",
    "from_row",
    "sort_key",
    "update_params",
]

_S = TaskState
_STATES = {state.value: state for state in TaskState}

#: Every column a :class:`Stored` is built from, in :func:`from_row` order.
COLUMNS = (
    "seq, ready_at, id, name, queue, state, payload, options, priority, enqueued_at, first_due_at,"
    " next_run_at, attempts, retries, stalls, expires_at, unique_key, started_at, finished_at, keep_until,"
    " last_error, archive_reason, result, errors, lease_token, lease_expires_at, cancel_requested, max_retries,"
    " traceback"
)
SELECT_TASK = f"SELECT {COLUMNS} FROM tasks"

#: What a claim's ``UPDATE ... RETURNING`` reads back for each task (``seq`` first): the columns a task
#: fresh from ``enqueue`` may hold, then 1 if any other column holds something else (the task ran before,
#: is unique, expires, ...). Each column read costs a GIL release in ``sqlite3`` (3.11), half a
#: microsecond a task for the columns of :data:`CLAIMED` that are nearly always empty.
FRESH = (
    "seq, id, name, queue, payload, options, priority, enqueued_at, first_due_at, attempts, lease_token,"
    " (next_run_at IS NOT NULL OR retries != 0 OR stalls != 0 OR expires_at IS NOT NULL"
    " OR unique_key IS NOT NULL OR finished_at IS NOT NULL OR keep_until IS NOT NULL OR last_error IS NOT NULL"
    " OR archive_reason IS NOT NULL OR result IS NOT NULL OR errors != '[]' OR max_retries IS NOT NULL"
    " OR traceback IS NOT NULL)"
)

#: Every column of a claimed task that the claim did not set itself (``seq`` first), for :func:`claimed`.
CLAIMED = (
    "seq, id, name, queue, payload, options, priority, enqueued_at, first_due_at, next_run_at, attempts,"
    " retries, stalls, expires_at, unique_key, finished_at, keep_until, last_error, archive_reason, result,"
    " errors, lease_token, max_retries, traceback"
)

#: Writes every mutable column of a task (parameters from :func:`update_params`).
UPDATE_TASK = (
    "UPDATE tasks SET state = ?, next_run_at = ?, attempts = ?, retries = ?, stalls = ?, started_at = ?,"
    " finished_at = ?, keep_until = ?, last_error = ?, archive_reason = ?, result = ?, errors = ?,"
    " lease_token = ?, lease_expires_at = ?, cancel_requested = ?, max_retries = ?, traceback = ?,"
    " expires_at = ?, ready_at = ?, sort_key = ?"
    " WHERE seq = ?"
)


@fast_init
@dataclass(frozen=True, slots=True)
class Stored:
    """A task record with its row's enqueue sequence and the time it last became pending."""

    rec: TaskRecord
    seq: int
    ready_at: float


def from_row(
    row: tuple[Any, ...],
    _record: type[TaskRecord] = TaskRecord,
    _state: Callable[[str], TaskState] = _STATES.__getitem__,
    _stored: type[Stored] = Stored,
) -> Stored:
    """A row in :data:`SELECT_TASK` column order (or any statement returning the same columns)."""
    # unpacked into locals and passed positionally in TaskRecord's field order: a claim builds one per
    # task, and indexing the row and matching keywords cost twice as much (the defaults bind the
    # globals once, for the same reason)
    # fmt: off
    (
        seq, ready_at, id_, name, queue, state, payload, options, priority, enqueued_at, first_due_at,
        next_run_at, attempts, retries, stalls, expires_at, unique_key, started_at, finished_at, keep_until,
        last_error, reason, result, errors, token, lease_expires_at, cancel, max_retries, traceback,
    ) = row
    rec = _record(
        id_, name, queue, _state(state), payload, options, priority, enqueued_at, first_due_at, next_run_at,
        attempts, retries, stalls, expires_at, unique_key, started_at, finished_at, keep_until, last_error,
        None if reason is None else ArchiveReason(reason), result, () if errors == "[]" else decode_errors(errors),
        token, lease_expires_at, bool(cancel), max_retries, traceback,
    )
    # fmt: on
    return _stored(rec, seq, ready_at)


def claimed(
    row: tuple[Any, ...],
    started_at: float,
    lease_expires_at: float,
    _record: type[TaskRecord] = TaskRecord,
    _active: TaskState = _S.ACTIVE,
) -> TaskRecord:
    """The record of a task just claimed, from a row in :data:`CLAIMED` column order.

    The claim's ``UPDATE`` set the state, ``started_at``, ``lease_expires_at`` and ``cancel_requested``
    to values the caller knows, so they are not read back.
    """
    # fmt: off
    (
        _, id_, name, queue, payload, options, priority, enqueued_at, first_due_at, next_run_at, attempts,
        retries, stalls, expires_at, unique_key, finished_at, keep_until, last_error, reason, result, errors,
        token, max_retries, traceback,
    ) = row
    return _record(
        id_, name, queue, _active, payload, options, priority, enqueued_at, first_due_at, next_run_at,
        attempts, retries, stalls, expires_at, unique_key, started_at, finished_at, keep_until, last_error,
        None if reason is None else ArchiveReason(reason), result, () if errors == "[]" else decode_errors(errors),
        token, lease_expires_at, False, max_retries, traceback,
    )
    # fmt: on


def fresh(
    row: tuple[Any, ...],
    started_at: float,
    lease_expires_at: float,
    _record: type[TaskRecord] = TaskRecord,
    _active: TaskState = _S.ACTIVE,
) -> TaskRecord:
    """The record of a task just claimed, from a row in :data:`FRESH` column order whose last column is 0."""
    _, id_, name, queue, payload, options, priority, enqueued_at, first_due_at, attempts, token, _ = row
    # fmt: off
    return _record(
        id_, name, queue, _active, payload, options, priority, enqueued_at, first_due_at, None, attempts, 0, 0,
        None, None, started_at, None, None, None, None, None, (), token, lease_expires_at, False, None, None,
    )
    # fmt: on


class ClaimedRows:
    """What a claim read back, made into records by :meth:`records` once its transaction committed:
    several processes on one file queue for its write lock, so nothing is built while holding it
    (the figures: docs/architecture.md, "Several processes on one file").
    """

    __slots__ = ("_parts", "count")

    def __init__(self) -> None:
        self._parts: list[tuple[list[tuple[Any, ...]], dict[int, tuple[Any, ...]], float, float]] = []
        self.count = 0

    def add(
        self, rows: list[tuple[Any, ...]], whole: dict[int, tuple[Any, ...]], started_at: float, expires: float
    ) -> None:
        """``rows`` in :data:`FRESH` order, in claim order; ``whole``: by ``seq``, in :data:`CLAIMED`
        order, the flagged ones (the last column of their row is 1)."""
        self._parts.append((rows, whole, started_at, expires))
        self.count += len(rows)

    def records(self) -> list[TaskRecord]:
        records: list[TaskRecord] = []
        for rows, whole, started_at, expires in self._parts:
            if whole:
                records += [
                    claimed(whole[row[0]], started_at, expires) if row[-1] else fresh(row, started_at, expires)
                    for row in rows
                ]
            else:
                records += [fresh(row, started_at, expires) for row in rows]
        return records


def sort_key(rec: TaskRecord, ready_at: float, aging: float | None) -> float:
    """The task's order key within its state (see ``schema``)."""
    state = rec.state
    if state is _S.PENDING:
        return ready_key(rec.priority, ready_at, aging)
    if state is _S.SCHEDULED or state is _S.RETRY:
        return rec.next_run_at or 0.0
    if state is _S.ACTIVE:
        return rec.started_at or 0.0
    return rec.finished_at or 0.0


def update_params(stored: Stored, key: float) -> tuple[Any, ...]:
    rec = stored.rec
    return (
        rec.state.value,
        rec.next_run_at,
        rec.attempts,
        rec.retries,
        rec.stalls,
        rec.started_at,
        rec.finished_at,
        rec.keep_until,
        rec.last_error,
        None if rec.archive_reason is None else rec.archive_reason.value,
        rec.result,
        encode_errors(rec.errors),
        rec.lease_token,
        rec.lease_expires_at,
        int(rec.cancel_requested),
        rec.max_retries,
        rec.traceback,
        rec.expires_at,  # lifted by an operator's run_now past it
        stored.ready_at,
        key,
        stored.seq,
    )


def encode_errors(errors: tuple[ErrorEntry, ...]) -> str:
    if not errors:
        return "[]"
    return json.dumps([[e.attempt, e.at, e.error] for e in errors])


def decode_errors(text: str) -> tuple[ErrorEntry, ...]:
    if text == "[]":
        return ()
    try:
        return tuple(ErrorEntry(int(a), float(at), str(err)) for a, at, err in json.loads(text))
    except (ValueError, TypeError) as exc:
        return (ErrorEntry.undecodable(text, exc),)
