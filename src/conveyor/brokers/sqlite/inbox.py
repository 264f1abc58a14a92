"""The inbox: where a one-task enqueue lands, to be folded into ``tasks`` by the next other write.

A task inserted into ``tasks`` writes three B-trees (the table, the ``id`` index and ``tasks_order``),
so its commit writes three WAL frames where a bare one-row transaction writes one. An enqueue of one
task with an id the app generated (``NewTask.fresh``: nothing can hold it, so there is no duplicate to
look for) and no unique key, into a queue without ``max_size``, while nobody listens for events,
appends one row to ``inbox`` instead: one B-tree, one frame, the bare transaction's cost.

Every other write transaction folds it into ``tasks`` first (``Database`` calls :func:`fold` after
``BEGIN IMMEDIATE``): in the inbox's order, which is the order of the enqueues' commits, so
``tasks.seq`` stays the enqueue sequence, and with the queue settings of that moment (a change of
settings is a write, which folds first), so each task gets the sort key it would have got at its
enqueue. A worker's claim therefore folds what was enqueued since its last one, in one set-based
statement: the index work is batched on the consumer's side. Reads never write: the reads of tasks
(``admin``) add the inbox's rows in their snapshot, each as the fold will store it (:func:`find`,
:func:`listed`, :func:`counts`). An enqueue folds the inbox itself once it holds :data:`FOLD_AT` rows,
so the inbox of a file no worker drains stays small.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from conveyor.brokers.sqlite.tx import LISTENING
from conveyor.brokers.transitions import due_after
from conveyor.model import NewTask, TaskState

__all__ = ["FOLD_AT", "append", "counts", "find", "fold", "listed"]

#: An enqueue folds the inbox once it holds this many rows (a fold of this many takes a few ms).
FOLD_AT = 1024

_COLUMNS = (
    "id, name, queue, state, payload, options, priority, enqueued_at, first_due_at, next_run_at, expires_at, ready_at"
)
_PENDING, _SCHEDULED = TaskState.PENDING.value, TaskState.SCHEDULED.value
#: One task into the inbox, unless its queue has a ``max_size`` or another broker object listens for
#: events (then ``rowcount`` is 0). Parameters: the twelve columns, then the queue, the wall-clock time
#: and the origin (``LISTENING``).
_APPEND = (
    f"INSERT INTO inbox ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
    " WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = ? AND max_size IS NOT NULL)"
    f" AND NOT {LISTENING}"
)
_ANY = "SELECT EXISTS (SELECT 1 FROM inbox)"
#: The sort key ``ready_key`` gives (``brokers.base``), with the queue's aging (``q``); a scheduled
#: task's is its due time.
_SORT_KEY = (
    "CASE WHEN i.state != 'pending' THEN i.next_run_at WHEN q.aging THEN i.ready_at - i.priority * q.aging"
    " ELSE -i.priority END"
)
#: The inbox's tasks as reads find them in ``tasks`` (``rows.COLUMNS``), then their sort key: with the
#: ``seq`` and sort key the fold will give them, and every other column at its default.
_AS_TASKS = (
    "SELECT (SELECT ifnull(max(seq), 0) FROM tasks) + i.n, i.ready_at, i.id, i.name, i.queue, i.state,"
    " i.payload, i.options, i.priority, i.enqueued_at, i.first_due_at, i.next_run_at, 0, 0, 0, i.expires_at,"
    f" NULL, NULL, NULL, NULL, NULL, NULL, NULL, '[]', NULL, NULL, 0, NULL, NULL, {_SORT_KEY}"
    " FROM inbox i LEFT JOIN queues q ON q.name = i.queue"
)
_NEW_QUEUES = "INSERT OR IGNORE INTO queues (name) SELECT queue FROM inbox GROUP BY queue ORDER BY min(n)"
# ``WHERE true``: SQLite's parser needs it before an upsert. A duplicate id can come only from a caller
# that broke ``fresh``'s promise: the task already stored is kept, and the file is never wedged by a
# fold that cannot finish.
_FOLD = (
    f"INSERT INTO tasks ({_COLUMNS}, sort_key)"
    " SELECT i.id, i.name, i.queue, i.state, i.payload, i.options, i.priority, i.enqueued_at, i.first_due_at,"
    f" i.next_run_at, i.expires_at, i.ready_at, {_SORT_KEY}"
    " FROM inbox i LEFT JOIN queues q ON q.name = i.queue WHERE true ORDER BY i.n"
    " ON CONFLICT (id) DO NOTHING"
)
_COUNTS = "SELECT queue, state, count(*), min(ready_at) FROM inbox GROUP BY queue, state"


def append(conn: sqlite3.Connection, task: NewTask, now: float, origin: str) -> str | None:
    """Append ``task`` (``fresh``, no unique key) in a write transaction that did not fold; its state
    (pending or scheduled), or None if it must take the general way (nothing written)."""
    due = due_after(task.run_at, now)
    state = _PENDING if due is None else _SCHEDULED
    cursor = conn.execute(
        _APPEND,
        (
            task.id, task.name, task.queue, state, task.payload, task.options, task.priority, now,
            now if due is None else due, due, task.expires_at, now, task.queue, time.time(), origin,
        ),
    )  # fmt: skip
    if cursor.rowcount == 0:
        return None
    if cursor.lastrowid is not None and cursor.lastrowid >= FOLD_AT:  # rowids restart once it is emptied
        fold(conn)
    return state


def _behind(conn: sqlite3.Connection) -> bool:
    """Whether ``tasks`` lacks tasks the inbox holds (in this connection's snapshot)."""
    return bool(conn.execute(_ANY).fetchone()[0])


def fold(conn: sqlite3.Connection) -> None:
    """Move the inbox into ``tasks`` (in a write transaction); nothing to do when it is empty."""
    if not _behind(conn):
        return
    conn.execute(_NEW_QUEUES)
    conn.execute(_FOLD)
    conn.execute("DELETE FROM inbox")


# -- reading: what a read of ``tasks`` adds from the inbox (``admin``), in the same snapshot -------


def find(conn: sqlite3.Connection, task_id: str) -> tuple[Any, ...] | None:
    """The inbox's task ``task_id`` as a row of ``rows.COLUMNS``, or None."""
    row = conn.execute(f"{_AS_TASKS} WHERE i.id = ?", (task_id,)).fetchone()
    return None if row is None else row[:-1]


def listed(conn: sqlite3.Connection, queue: str, state: str) -> list[tuple[Any, ...]]:
    """The inbox's tasks of ``queue`` in ``state``: rows of ``rows.COLUMNS`` followed by their sort key."""
    return conn.execute(f"{_AS_TASKS} WHERE i.queue = ? AND i.state = ?", (queue, state)).fetchall()


def counts(conn: sqlite3.Connection) -> list[tuple[str, str, int, float]]:
    """``(queue, state, how many, earliest ready_at)`` of the inbox's tasks."""
    return conn.execute(_COUNTS).fetchall()
