"""Reads and operator actions: ``get``, ``list_tasks``, ``queues``, queue settings, run/archive/cancel/delete/purge."""

from __future__ import annotations

import heapq
import sqlite3
from itertools import islice
from typing import Any

from conveyor.brokers import transitions
from conveyor.brokers.sqlite import inbox
from conveyor.brokers.sqlite.rows import COLUMNS, SELECT_TASK, from_row
from conveyor.brokers.sqlite.tx import Tx, load_settings
from conveyor.brokers.transitions import empty_counts
from conveyor.model import QueueInfo, QueueSettings, TaskRecord, TaskState

__all__ = [
    "archive",
    "cancel",
    "command_worker",
    "configure_queue",
    "delete",
    "get",
    "list_tasks",
    "purge",
    "queues",
    "run_now",
    "set_paused",
    "worker_command",
]

_S = TaskState
_VISIBLE = "(keep_until IS NULL OR keep_until > ?)"

# -- reading (plain connections, one snapshot each; the inbox's tasks too: inbox.py) ---------------


def get(conn: sqlite3.Connection, task_id: str, now: float) -> TaskRecord | None:
    row = conn.execute(f"{SELECT_TASK} WHERE id = ? AND {_VISIBLE}", (task_id, now)).fetchone()
    if row is None:
        row = inbox.find(conn, task_id)
    return None if row is None else from_row(row).rec


def list_tasks(
    conn: sqlite3.Connection, queue: str, state: TaskState, now: float, offset: int, limit: int
) -> list[TaskRecord]:
    order = "sort_key DESC, seq DESC" if state in (_S.COMPLETED, _S.ARCHIVED) else "sort_key, seq"
    waiting = inbox.listed(conn, queue, state.value) if state in (_S.PENDING, _S.SCHEDULED) else []
    if waiting:  # merged in claim order with the first offset + limit of ``tasks`` (sort key, then seq)
        cursor = conn.execute(
            f"SELECT {COLUMNS}, sort_key FROM tasks WHERE queue = ? AND state = ? AND {_VISIBLE}"
            f" ORDER BY {order} LIMIT ?",
            (queue, state.value, now, offset + limit),
        )
        merged = heapq.merge(cursor, sorted(waiting, key=_claim_order), key=_claim_order)
        return [from_row(row[:-1]).rec for row in islice(merged, offset, offset + limit)]
    cursor = conn.execute(
        f"{SELECT_TASK} WHERE queue = ? AND state = ? AND {_VISIBLE} ORDER BY {order} LIMIT ? OFFSET ?",
        (queue, state.value, now, limit, offset),
    )
    return [from_row(row).rec for row in cursor]


def _claim_order(row: tuple[Any, ...]) -> tuple[float, int]:
    return row[-1], row[0]  # sort key, seq


def queues(conn: sqlite3.Connection, now: float) -> list[QueueInfo]:
    settings = {
        row[0]: QueueSettings(row[0], row[1], row[2], row[3], bool(row[4]), row[5])
        for row in conn.execute("SELECT name, max_size, concurrency, aging, paused, partitions FROM queues")
    }
    counts: dict[str, dict[str, int]] = {name: empty_counts() for name in settings}
    for queue, state, count in conn.execute(
        f"SELECT queue, state, count(*) FROM tasks WHERE {_VISIBLE} GROUP BY queue, state", (now,)
    ):
        bucket = counts.setdefault(queue, empty_counts())
        bucket[state] += count
        bucket["total"] += count
    oldest = dict(conn.execute("SELECT queue, min(ready_at) FROM tasks WHERE state = 'pending' GROUP BY queue"))
    for queue, state, count, ready_at in inbox.counts(conn):
        bucket = counts.setdefault(queue, empty_counts())
        bucket[state] += count
        bucket["total"] += count
        if state == _S.PENDING.value:
            oldest[queue] = min(oldest.get(queue, ready_at), ready_at)
    return [
        QueueInfo(settings.get(name) or QueueSettings(name=name), counts[name], oldest.get(name))
        for name in sorted(counts)
    ]


# -- queue settings ------------------------------------------------------------------------------


def configure_queue(tx: Tx, settings: QueueSettings) -> None:
    old = load_settings(tx.conn, settings.name)
    tx.execute(
        "INSERT INTO queues (name, max_size, concurrency, aging, partitions) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET max_size = excluded.max_size, concurrency = excluded.concurrency,"
        " aging = excluded.aging, partitions = excluded.partitions",
        (settings.name, settings.max_size, settings.concurrency, settings.aging, settings.partitions),
    )
    if old.aging != settings.aging:  # the only rescoring: ready keys depend on aging (see base.ready_key)
        aging = settings.aging or 0.0
        tx.execute(
            "UPDATE tasks SET sort_key = CASE WHEN ? THEN ready_at - priority * ? ELSE CAST(-priority AS REAL) END"
            " WHERE queue = ? AND state = 'pending'",
            (bool(settings.aging), aging, settings.name),
        )


def set_paused(tx: Tx, queue: str, paused: bool) -> None:
    tx.execute(
        "INSERT INTO queues (name, paused) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
        (queue, int(paused)),
    )


# -- admin ---------------------------------------------------------------------------------------


def run_now(tx: Tx, task_id: str, now: float) -> None:
    stored = tx.existing(task_id, now)
    tx.change(stored, transitions.run_now(stored.rec, now), now)


def archive(tx: Tx, task_id: str, now: float) -> None:
    stored = tx.existing(task_id, now)
    tx.change(stored, transitions.manually_archived(stored.rec, now, tx.policy), now)


def cancel(tx: Tx, task_id: str, now: float) -> TaskState:
    stored = tx.existing(task_id, now)
    tx.change(stored, transitions.cancelled(stored.rec, now, tx.policy), now)
    return _S.ARCHIVED


def delete(tx: Tx, task_id: str, now: float) -> None:
    stored = tx.existing(task_id, now)
    transitions.check_delete(stored.rec)
    tx.remove(stored, now, report=True)


def purge(tx: Tx, queue: str, state: TaskState, now: float, limit: int | None) -> int:
    doomed = tx.rows(
        f"WHERE queue = ? AND state = ? AND {_VISIBLE} ORDER BY seq LIMIT ?",
        (queue, state.value, now, -1 if limit is None else limit),
    )
    for stored in doomed:
        tx.remove(stored, now, report=True)
    return len(doomed)


# -- commands to workers ---------------------------------------------------------------------------


def command_worker(tx: Tx, worker_id: str, command: str, until: float) -> None:
    sql = "INSERT OR REPLACE INTO worker_commands (id, command, until) VALUES (?, ?, ?)"
    tx.execute(sql, (worker_id, command, until))


def worker_command(conn: sqlite3.Connection, worker_id: str, now: float) -> str | None:
    row = conn.execute("SELECT command FROM worker_commands WHERE id = ? AND until > ?", (worker_id, now)).fetchone()
    return None if row is None else str(row[0])
