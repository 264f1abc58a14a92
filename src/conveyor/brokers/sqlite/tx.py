"""One write transaction's view of the store: finds rows, applies the shared transitions to them.

The rules themselves are ``conveyor.brokers.transitions``; :meth:`Tx.change` stores what one returns.

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

from conveyor.brokers import transitions
from conveyor.brokers.sqlite.rows import SELECT_TASK, UPDATE_TASK, Stored, from_row, sort_key, update_params
from conveyor.brokers.transitions import READY_AT, Change
from conveyor.errors import TaskNotFound
from conveyor.model import ArchiveReason, BrokerPolicy, QueueSettings, TaskState

__all__ = ["LISTENING", "EventRow", "Param", "Tx", "due_soon", "load_settings", "set_clause"]

_S = TaskState

_SETTINGS = "SELECT max_size, concurrency, aging, paused FROM queues WHERE name = ?"
#: An :class:`~conveyor.model.Event`'s fields, in order: a transaction collects these (a tuple costs a
#: fortieth of an Event to build) and the broker makes Events of them only for a subscriber.
EventRow = tuple[str, str | None, str, str, float]

#: Whether a broker object other than the given origin listens for events (1 or 0); parameters: the
#: wall-clock time, then the origin. Statements here bind plain ``?`` placeholders only: Python 3.12.0
#: to 3.12.3 take numbered ones (``?1``) for named ones and warn on every execute (CPython gh-117995).
LISTENING = "EXISTS (SELECT 1 FROM listeners WHERE until > ? AND origin != ?)"
_LISTENING = f"SELECT {LISTENING}"
_INSERT_EVENT = "INSERT INTO events (origin, task_id, old_state, new_state, queue, at) VALUES (?, ?, ?, ?, ?, ?)"
#: A task scheduled or retried to fall due within this many seconds rings its queue after the commit
#: (``SQLiteBroker._write``), so a waiting worker learns when it falls due; of a later one it learns at
#: its next claim, which comes sooner (a worker claims every ``poll_interval`` while idle).
_DUE_SOON = 60.0


def due_soon(due: float | None, now: float) -> bool:
    """Whether a task falling due at ``due`` rings its queue after the commit (``_DUE_SOON``)."""
    return due is not None and due - now < _DUE_SOON


class Tx:
    """Transitions applied inside one write transaction; ``events`` lists what changed, in order."""

    def __init__(self, conn: sqlite3.Connection, policy: BrokerPolicy, origin: str = "") -> None:
        self.conn = conn
        self.policy = policy
        self.origin = origin  # the broker object's (``save_events``)
        #: Whether another broker object listens for events, once read (an operation may read it with
        #: what it reads first; any time in a write transaction is as good as its end).
        self.listening: bool | None = None
        self.events: list[EventRow] = []
        self.due_soon: set[str] = set()  # queues given a task falling due within _DUE_SOON s (``note_due``)
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

    def know_settings(self, queue: str, row: tuple[Any, ...] | None) -> QueueSettings:
        """``queue``'s settings from a row the caller read (``max_size, concurrency, aging, paused``;
        None: the queue has no row), kept as :meth:`settings` would keep them."""
        settings = self._settings[queue] = _settings(queue, row)
        if row is not None:
            self._known.add(queue)
        return settings

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
        listening = self.listening
        if listening is None:
            listening = self.conn.execute(_LISTENING, (time.time(), origin)).fetchone()[0] == 1
        if listening:
            self.conn.executemany(_INSERT_EVENT, [(origin, *event) for event in self.events])
            return len(self.events)
        return 0

    # -- storing transitions -------------------------------------------------------------------

    def put(self, stored: Stored, old: TaskState | None, now: float) -> Stored:
        rec = stored.rec
        aging = self.settings(rec.queue).aging if rec.state is _S.PENDING else None
        self._writes[stored.seq] = update_params(stored, sort_key(rec, stored.ready_at, aging))
        if old is not rec.state:
            self.events.append((rec.id, old and old.value, rec.state.value, rec.queue, now))
        if rec.state is _S.SCHEDULED or rec.state is _S.RETRY:
            self.note_due(rec.queue, rec.next_run_at, now)
        return stored

    def note_due(self, queue: str, due: float | None, now: float) -> None:
        """A task of ``queue`` falls due at ``due`` (None: it waits for no time)."""
        if due_soon(due, now):
            self.due_soon.add(queue)

    def change(self, stored: Stored, change: Change, now: float) -> Stored:
        """Apply a rule's ``change`` (``conveyor.brokers.transitions``) to ``stored`` and buffer its row."""
        ready_at = change.pop(READY_AT, stored.ready_at)
        return self.put(Stored(replace(stored.rec, **change), stored.seq, ready_at), stored.rec.state, now)

    def remove(self, stored: Stored, now: float, *, report: bool) -> None:
        self.execute("DELETE FROM tasks WHERE seq = ?", (stored.seq,))
        if report:
            self.events.append((stored.rec.id, stored.rec.state.value, "deleted", stored.rec.queue, now))

    def existing(self, task_id: str, now: float) -> Stored:
        found = self.rows("WHERE id = ? AND (keep_until IS NULL OR keep_until > ?)", (task_id, now))
        if not found:
            raise TaskNotFound(task_id)
        return found[0]

    # -- sweeps (``limit`` None: everything due) -------------------------------------------------

    def anything_due(self, now: float) -> bool:
        """Whether a sweep has work: a due task, an expired lease or a deadline passed (one statement)."""
        row = self.execute(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE next_run_at <= ?)"
            " OR EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at <= ?)"
            " OR EXISTS (SELECT 1 FROM tasks WHERE expires_at <= ? AND expires_at IS NOT NULL"
            " AND state IN ('pending', 'scheduled', 'retry'))",
            (now, now, now),
        ).fetchone()
        return bool(row[0])

    def promote(self, now: float, limit: int | None) -> int:
        due = self.rows(
            "WHERE next_run_at <= ? ORDER BY next_run_at, seq LIMIT ?", (now, -1 if limit is None else limit)
        )
        for stored in due:
            self.change(stored, transitions.promoted(stored.rec), now)
        return len(due)

    def reap(self, now: float, limit: int | None) -> int:
        """Reclaim expired leases, then archive tasks past ``expires_at`` (the reference's order)."""
        cap = -1 if limit is None else limit
        done = 0
        for stored in self.rows("WHERE lease_expires_at <= ? ORDER BY lease_expires_at, seq LIMIT ?", (now, cap)):
            self.change(stored, transitions.reaped(stored.rec, now, self.policy), now)
            done += 1
        if limit is not None and done >= limit:
            return done
        for stored in self.rows(
            "WHERE expires_at <= ? AND expires_at IS NOT NULL AND state IN ('pending', 'scheduled', 'retry')"
            " ORDER BY expires_at, seq LIMIT ?",
            (now, -1 if limit is None else limit - done),
        ):
            self.change(stored, transitions.expired(stored.rec, now, self.policy), now)
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


class Param:
    """The ``n``-th value (from 0) of a statement's row, standing in for a value when a rule's change
    is rendered by :func:`set_clause`."""

    def __init__(self, n: int) -> None:
        self.n = n


def set_clause(change: Change) -> tuple[str, tuple[int, ...]]:
    """A rule's ``change`` as the ``SET`` list of an ``UPDATE`` of ``tasks``, built once at import so a
    statement run per row follows the rule: :class:`Param` values as plain ``?`` parameters, the others
    as literals; with the row's places those parameters take, in order (see :data:`LISTENING`)."""
    places = tuple(value.n for value in change.values() if isinstance(value, Param))
    return ", ".join(f"{column} = {_literal(value)}" for column, value in change.items()), places


def _literal(value: Any) -> str:
    if isinstance(value, Param):
        return "?"
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, TaskState | ArchiveReason):
        return f"'{value.value}'"
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"no SQL literal for {value!r}")
