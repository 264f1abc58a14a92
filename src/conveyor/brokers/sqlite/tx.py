"""One write transaction's view of the store: the task transitions of the reference broker, in SQL.

A :class:`Tx` wraps the connection of a ``BEGIN IMMEDIATE`` transaction. Task writes are buffered
per row (last write wins) and flushed by ``executemany`` before the next read, so a batch of
transitions costs one statement execution per row and reads always see the transaction's own
writes. Events are collected in transition order and written to the ``events`` table at the end.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from conveyor.brokers.base import MAX_ERRORS_KEPT
from conveyor.brokers.sqlite.rows import SELECT_TASK, UPDATE_TASK, Stored, from_row, sort_key, update_params
from conveyor.errors import TaskNotFound
from conveyor.model import ArchiveReason, BrokerPolicy, ErrorEntry, Event, QueueSettings, TaskState

__all__ = ["EXPIRED_ERROR", "Tx", "load_settings", "with_error"]

_S = TaskState
EXPIRED_ERROR = "Expired: not started before its deadline"

_SETTINGS = "SELECT max_size, concurrency, aging, paused FROM queues WHERE name = ?"
_INSERT_EVENT = "INSERT INTO events (origin, task_id, old_state, new_state, queue, at) VALUES (?, ?, ?, ?, ?, ?)"


class Tx:
    """Transitions applied inside one write transaction; ``events`` lists what changed, in order."""

    def __init__(self, conn: sqlite3.Connection, policy: BrokerPolicy) -> None:
        self.conn = conn
        self.policy = policy
        self.events: list[Event] = []
        self._writes: dict[int, tuple[Any, ...]] = {}
        self._settings: dict[str, QueueSettings] = {}
        self._known: set[str] = set()  # queues with a row in ``queues``

    # -- plumbing ------------------------------------------------------------------------------

    def flush(self) -> None:
        if self._writes:
            self.conn.executemany(UPDATE_TASK, self._writes.values())
            self._writes.clear()

    def rows(self, where: str, params: Iterable[Any] = ()) -> list[Stored]:
        """Tasks matching ``where`` (an SQL tail after ``FROM tasks``), seeing this transaction's writes."""
        self.flush()
        return [from_row(row) for row in self.conn.execute(f"{SELECT_TASK} {where}", tuple(params))]

    def execute(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        self.flush()
        return self.conn.execute(sql, tuple(params))

    def settings(self, queue: str) -> QueueSettings:
        cached = self._settings.get(queue)
        if cached is None:
            row = self.conn.execute(_SETTINGS, (queue,)).fetchone()
            cached = self._settings[queue] = _settings(queue, row)
            if row is not None:
                self._known.add(queue)
        return cached

    def queue_known(self, queue: str) -> bool:
        """Whether ``queue`` has its row in ``queues`` (read by :meth:`settings` in this transaction)."""
        return queue in self._known

    def save_events(self, origin: str) -> int:
        """Write the collected events if another broker object listens (once, just before commit).

        Returns how many were written. The check runs in this transaction, so a listener that
        registered before it (in ``EventHub.subscribe``) never misses an event.
        """
        self.flush()
        if not self.events:
            return 0
        listening = self.conn.execute(
            "SELECT 1 FROM listeners WHERE until > ? AND origin != ? LIMIT 1", (time.time(), origin)
        ).fetchone()
        if listening is not None:
            self.conn.executemany(
                _INSERT_EVENT, [(origin, e.task_id, e.old_state, e.new_state, e.queue, e.at) for e in self.events]
            )
            return len(self.events)
        return 0

    # -- transitions (the reference broker's internals) ----------------------------------------

    def put(self, stored: Stored, old: TaskState | None, now: float) -> Stored:
        rec = stored.rec
        aging = self.settings(rec.queue).aging if rec.state is _S.PENDING else None
        self._writes[stored.seq] = update_params(stored, sort_key(rec, stored.ready_at, aging))
        if old is not rec.state:
            self.events.append(Event(rec.id, old and old.value, rec.state.value, rec.queue, now))
        return stored

    def finish(self, stored: Stored, state: TaskState, now: float, keep_for: float | None, **changes: Any) -> Stored:
        keep = self.policy.archive_retention if keep_for is None else keep_for
        rec = replace(
            stored.rec,
            state=state,
            finished_at=now,
            keep_until=now + keep,
            next_run_at=None,
            lease_token=None,
            lease_expires_at=None,
            cancel_requested=False,
            **changes,
        )
        return self.put(replace(stored, rec=rec), stored.rec.state, now)

    def archive(self, stored: Stored, reason: ArchiveReason, now: float, error: str | None) -> Stored:
        rec = stored.rec
        errors = rec.errors
        if error is not None:
            errors = with_error(errors, ErrorEntry(rec.attempts, now, error))
        last_error = error if error is not None else rec.last_error
        return self.finish(stored, _S.ARCHIVED, now, None, archive_reason=reason, last_error=last_error, errors=errors)

    def make_pending(self, stored: Stored, ready_at: float, now: float, **changes: Any) -> Stored:
        rec = replace(
            stored.rec, state=_S.PENDING, next_run_at=None, lease_token=None, lease_expires_at=None, **changes
        )
        return self.put(Stored(rec, stored.seq, ready_at), stored.rec.state, now)

    def remove(self, stored: Stored, now: float, *, report: bool) -> None:
        self.execute("DELETE FROM tasks WHERE seq = ?", (stored.seq,))
        if report:
            self.events.append(Event(stored.rec.id, stored.rec.state.value, "deleted", stored.rec.queue, now))

    def existing(self, task_id: str, now: float) -> Stored:
        found = self.rows("WHERE id = ? AND (keep_until IS NULL OR keep_until > ?)", (task_id, now))
        if not found:
            raise TaskNotFound(task_id)
        return found[0]

    # -- sweeps (``limit`` None: everything due) -------------------------------------------------

    def anything_due(self, now: float) -> bool:
        """Whether a sweep has work: a due task, an expired lease or a deadline passed (one statement)."""
        row = self.execute(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE next_run_at <= ?1)"
            " OR EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at <= ?1)"
            " OR EXISTS (SELECT 1 FROM tasks WHERE expires_at <= ?1 AND expires_at IS NOT NULL"
            " AND state IN ('pending', 'scheduled', 'retry'))",
            (now,),
        ).fetchone()
        return bool(row[0])

    def promote(self, now: float, limit: int | None) -> int:
        due = self.rows(
            "WHERE next_run_at <= ? ORDER BY next_run_at, seq LIMIT ?", (now, -1 if limit is None else limit)
        )
        for stored in due:
            assert stored.rec.next_run_at is not None
            self.make_pending(stored, stored.rec.next_run_at, now)
        return len(due)

    def reap(self, now: float, limit: int | None) -> int:
        """Reclaim expired leases, then archive tasks past ``expires_at`` (the reference's order)."""
        cap = -1 if limit is None else limit
        done = 0
        for stored in self.rows("WHERE lease_expires_at <= ? ORDER BY lease_expires_at, seq LIMIT ?", (now, cap)):
            rec = stored.rec
            assert rec.lease_expires_at is not None
            stalls = rec.stalls + 1
            error = f"LeaseExpired: lease expired without an acknowledgement ({stalls} stall(s))"
            errors = with_error(rec.errors, ErrorEntry(rec.attempts, now, error))
            stored = replace(stored, rec=replace(rec, stalls=stalls))
            if stalls >= self.policy.max_stalls:
                self.archive(stored, ArchiveReason.POISON, now, error)
            else:
                self.make_pending(stored, rec.lease_expires_at, now, last_error=error, errors=errors)
            done += 1
        if limit is not None and done >= limit:
            return done
        for stored in self.rows(
            "WHERE expires_at <= ? AND expires_at IS NOT NULL AND state IN ('pending', 'scheduled', 'retry')"
            " ORDER BY expires_at, seq LIMIT ?",
            (now, -1 if limit is None else limit - done),
        ):
            self.archive(stored, ArchiveReason.EXPIRED, now, EXPIRED_ERROR)
            done += 1
        return done

    def clean_retained(self, now: float, limit: int | None) -> int:
        """Delete tasks past ``keep_until`` (unreported), oldest deadline first."""
        cursor = self.execute(
            "DELETE FROM tasks WHERE seq IN"
            " (SELECT seq FROM tasks WHERE keep_until <= ? ORDER BY keep_until, seq LIMIT ?)",
            (now, -1 if limit is None else limit),
        )
        return max(cursor.rowcount, 0)

    def count(self, queue: str, states: Iterable[TaskState]) -> int:
        total = 0
        for state in states:
            row = self.execute("SELECT count(*) FROM tasks WHERE queue = ? AND state = ?", (queue, state.value))
            total += int(row.fetchone()[0])
        return total


def load_settings(conn: sqlite3.Connection, queue: str) -> QueueSettings:
    return _settings(queue, conn.execute(_SETTINGS, (queue,)).fetchone())


def _settings(queue: str, row: tuple[Any, ...] | None) -> QueueSettings:
    if row is None:
        return QueueSettings(name=queue)
    return QueueSettings(name=queue, max_size=row[0], concurrency=row[1], aging=row[2], paused=bool(row[3]))


def with_error(errors: Iterable[ErrorEntry], entry: ErrorEntry) -> tuple[ErrorEntry, ...]:
    return (*errors, entry)[-MAX_ERRORS_KEPT:]
