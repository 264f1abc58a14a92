"""The producing, consuming and maintenance operations, each run inside one write transaction (:class:`Tx`)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.brokers.base import ready_key, records_limit
from conveyor.brokers.sqlite.rows import Stored
from conveyor.brokers.sqlite.tx import EXPIRED_ERROR, Tx, with_error
from conveyor.errors import QueueFull
from conveyor.history import KEEP_MINUTES, Tally, window
from conveyor.model import (
    UNFINISHED,
    ArchiveReason,
    ErrorEntry,
    Event,
    LeaseStatus,
    NewTask,
    Outcome,
    TaskRecord,
    TaskState,
)

__all__ = ["claim", "clean", "enqueue", "extend", "settle"]

_S = TaskState
_PENDING, _SCHEDULED = _S.PENDING.value, _S.SCHEDULED.value
_CHUNK = 500  # ids per ``IN (...)`` list, well under SQLite's variable limit
_COUNT = (
    "INSERT INTO history (minute, queue, completed, retried, archived) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (minute, queue) DO UPDATE SET completed = completed + excluded.completed,"
    " retried = retried + excluded.retried, archived = archived + excluded.archived"
)

_INSERT_TASK = (
    "INSERT INTO tasks (id, name, queue, state, payload, options, priority, enqueued_at, first_due_at,"
    " next_run_at, expires_at, unique_key, ready_at, sort_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


# -- producing ---------------------------------------------------------------------------------


def enqueue(tx: Tx, tasks: Sequence[NewTask], now: float) -> list[str | None]:
    """Insert ``tasks`` (duplicates skipped); raises QueueFull before writing any of them."""
    tx.clean_retained(now, None)  # like the reference: expired-retention ids and unique keys are free again
    existing: set[str] = set()
    for chunk in _chunks(list({t.id for t in tasks})):
        cursor = tx.execute(f"SELECT id FROM tasks WHERE id IN ({_marks(chunk)})", chunk)
        existing.update(row[0] for row in cursor)
    holders: dict[str, tuple[str, float, str | None]] = {}
    for chunk in _chunks(list({t.unique_key for t in tasks if t.unique_key is not None})):
        cursor = tx.execute(
            "SELECT u.key, u.task_id, u.until, t.state FROM uniques u LEFT JOIN tasks t ON t.id = u.task_id"
            f" WHERE u.key IN ({_marks(chunk)})",
            chunk,
        )
        holders.update((row[0], (row[1], row[2], row[3])) for row in cursor)

    results: list[str | None] = []
    taken: set[str] = set()
    keys: dict[str, str] = {}
    adding: dict[str, int] = {}
    for task in tasks:
        dup = _duplicate_of(task, now, existing, taken, keys, holders)
        results.append(dup)
        if dup is None:
            taken.add(task.id)
            if task.unique_key is not None:
                keys[task.unique_key] = task.id
            adding[task.queue] = adding.get(task.queue, 0) + 1
    for queue, count in adding.items():
        max_size = tx.settings(queue).max_size
        if max_size is not None and tx.count(queue, UNFINISHED) + count > max_size:
            raise QueueFull(queue, max_size)

    rows: list[tuple[Any, ...]] = []
    uniques: list[tuple[str, str, float]] = []
    aging = {queue: tx.settings(queue).aging for queue in adding}
    events = tx.events
    for task, dup in zip(tasks, results, strict=True):
        if dup is not None:
            continue
        due = task.run_at if task.run_at is not None and task.run_at > now else None
        if due is None:
            state, key = _PENDING, ready_key(task.priority, now, aging[task.queue])
        else:
            state, key = _SCHEDULED, due
        rows.append((
            task.id, task.name, task.queue, state, task.payload, task.options, task.priority, now,
            now if due is None else due, due, task.expires_at, task.unique_key, now, key,
        ))  # fmt: skip
        if task.unique_key is not None and task.unique_until is not None:
            uniques.append((task.unique_key, task.id, task.unique_until))
        events.append(Event(task.id, None, state, task.queue, now))
    if rows:
        tx.conn.executemany("INSERT OR IGNORE INTO queues (name) VALUES (?)", [(q,) for q in adding])
        tx.conn.executemany(_INSERT_TASK, rows)
        if uniques:
            tx.conn.executemany("INSERT OR REPLACE INTO uniques (key, task_id, until) VALUES (?, ?, ?)", uniques)
    return results


def _duplicate_of(
    task: NewTask,
    now: float,
    existing: set[str],
    taken: set[str],
    keys: dict[str, str],
    holders: dict[str, tuple[str, float, str | None]],
) -> str | None:
    if task.id in taken or task.id in existing:
        return task.id
    if task.unique_key is None:
        return None
    if task.unique_key in keys:
        return keys[task.unique_key]
    holder = holders.get(task.unique_key)
    if holder is None:
        return None
    holder_id, until, state = holder
    if state is not None and _S(state) in UNFINISHED and now < until:
        return holder_id
    return None


# -- consuming ---------------------------------------------------------------------------------


def claim(tx: Tx, queues: Sequence[str], now: float, lease_for: float, limit: int) -> list[TaskRecord]:
    if tx.anything_due(now):
        tx.promote(now, None)
        tx.reap(now, None)
    claimed: list[TaskRecord] = []
    for queue in queues:
        if len(claimed) >= limit:
            break
        settings = tx.settings(queue)
        if settings.paused:
            continue
        active = None if settings.concurrency is None else tx.count(queue, (_S.ACTIVE,))
        while len(claimed) < limit:
            need = limit - len(claimed)
            if active is not None:
                need = min(need, (settings.concurrency or 0) - active)
                if need <= 0:
                    break
            ready = tx.rows("WHERE queue = ? AND state = 'pending' ORDER BY sort_key, seq LIMIT ?", (queue, need))
            if not ready:
                break
            for stored in ready:
                rec = stored.rec
                if rec.expires_at is not None and rec.expires_at <= now:
                    tx.archive(stored, ArchiveReason.EXPIRED, now, EXPIRED_ERROR)
                    continue
                rec = replace(
                    rec,
                    state=_S.ACTIVE,
                    attempts=rec.attempts + 1,
                    started_at=now,
                    lease_token=secrets.token_hex(16),
                    lease_expires_at=now + lease_for,
                    cancel_requested=False,
                )
                claimed.append(tx.put(replace(stored, rec=rec), _S.PENDING, now).rec)
                if active is not None:
                    active += 1
    return claimed


def settle(tx: Tx, outcomes: Sequence[Outcome], now: float) -> list[bool]:
    current: dict[str, Stored] = {}
    for chunk in _chunks(list({o.task_id for o in outcomes})):
        current.update((s.rec.id, s) for s in tx.rows(f"WHERE id IN ({_marks(chunk)})", chunk))
    applied: list[bool] = []
    tally = Tally()
    for outcome in outcomes:
        stored = current.get(outcome.task_id)
        if stored is None or stored.rec.state is not _S.ACTIVE or stored.rec.lease_token != outcome.token:
            applied.append(False)
            continue
        if outcome.max_retries is not None and records_limit(outcome):
            stored = replace(stored, rec=replace(stored.rec, max_retries=outcome.max_retries))
        current[outcome.task_id] = _apply(tx, stored, outcome, now)
        tally.add(stored.rec.queue, outcome.kind, now)
        applied.append(True)
    for row in tally.rows():
        tx.execute(_COUNT, (row.minute, row.queue, row.completed, row.retried, row.archived))
    return applied


def _apply(tx: Tx, stored: Stored, outcome: Outcome, now: float) -> Stored:
    rec = stored.rec
    if outcome.kind == "complete":
        return tx.finish(stored, _S.COMPLETED, now, outcome.keep_for, result=outcome.result, last_error=None)
    if outcome.kind == "retry":
        error = outcome.error or "Retry"
        new = replace(
            rec,
            state=_S.RETRY,
            retries=rec.retries + 1,
            next_run_at=outcome.run_at if outcome.run_at is not None else now,
            last_error=error,
            errors=with_error(rec.errors, ErrorEntry(rec.attempts, now, error)),
            lease_token=None,
            lease_expires_at=None,
            cancel_requested=False,
        )
        return tx.put(replace(stored, rec=new), rec.state, now)
    if outcome.kind == "archive":
        return tx.archive(stored, outcome.reason or ArchiveReason.FAILED, now, outcome.error)
    if outcome.kind == "release":
        changes: dict[str, Any] = {"attempts": max(0, rec.attempts - 1), "cancel_requested": False}
        if outcome.error is not None:
            changes["last_error"] = outcome.error
        if outcome.run_at is not None and outcome.run_at > now:
            new = replace(
                rec, state=_S.SCHEDULED, next_run_at=outcome.run_at, lease_token=None, lease_expires_at=None, **changes
            )
            return tx.put(replace(stored, rec=new), rec.state, now)
        return tx.make_pending(stored, now, now, **changes)
    raise ValueError(f"unknown outcome kind {outcome.kind!r}")


def extend(tx: Tx, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
    found = tx.rows("WHERE id = ?", (task_id,))
    if not found or found[0].rec.state is not _S.ACTIVE or found[0].rec.lease_token != token:
        return None
    stored = found[0]
    rec = replace(stored.rec, lease_expires_at=now + lease_for)
    tx.put(replace(stored, rec=rec), rec.state, now)
    return LeaseStatus(now + lease_for, rec.cancel_requested)


# -- maintenance -------------------------------------------------------------------------------


def clean(tx: Tx, now: float, limit: int, max_archived: int) -> int:
    """Delete tasks past retention, then the oldest archived beyond ``max_archived`` per queue."""
    removed = tx.clean_retained(now, limit)
    queues = [row[0] for row in tx.execute("SELECT name FROM queues ORDER BY rowid")]
    for queue in queues:
        excess = tx.count(queue, (_S.ARCHIVED,)) - max_archived
        if excess > 0 and removed < limit:
            take = min(excess, limit - removed)
            tx.execute(
                "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks WHERE queue = ? AND state = 'archived'"
                " ORDER BY sort_key, seq LIMIT ?)",
                (queue, take),
            )
            removed += take
    tx.execute("DELETE FROM history WHERE minute < ?", (window(now, KEEP_MINUTES)[0],))
    return removed
