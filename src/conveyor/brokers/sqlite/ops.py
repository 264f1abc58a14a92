"""The producing, consuming and maintenance operations, each run inside one write transaction (:class:`Tx`)."""

from __future__ import annotations

import operator
import secrets
import time
from collections.abc import Sequence
from typing import Any

from conveyor.brokers import transitions
from conveyor.brokers.base import ready_key
from conveyor.brokers.sqlite.rows import CLAIMED, FRESH, ClaimedRows
from conveyor.brokers.sqlite.tx import LISTENING, Param, Tx, set_clause
from conveyor.errors import QueueFull
from conveyor.history import KEEP_MINUTES, Tally, window
from conveyor.model import (
    UNFINISHED,
    LeaseStatus,
    NewTask,
    Outcome,
    TaskState,
)

__all__ = ["claim", "claim_noting_due", "clean", "enqueue", "extend", "next_due", "settle"]

_S = TaskState
_PENDING, _SCHEDULED, _ACTIVE, _COMPLETED = _S.PENDING.value, _S.SCHEDULED.value, _S.ACTIVE.value, _S.COMPLETED.value
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
_INSERT_NEW_TASK = f"{_INSERT_TASK} ON CONFLICT (id) DO NOTHING"
_DELETE_STALE = "DELETE FROM tasks WHERE id = ? AND keep_until <= ?"
#: Before a one-task enqueue (parameters ``wall, origin, queue``): whether anyone listens
#: (``Tx.listening``), whether the queue has a row, and its settings (as ``Tx.settings`` reads them).
_PRELUDE = (
    f"SELECT {LISTENING}, q.rowid IS NOT NULL,"
    " q.max_size, q.concurrency, q.aging, q.paused FROM (SELECT 1) LEFT JOIN queues q ON q.name = ?"
)


#: A queue's next pending tasks (``queue, limit``), in claim order (read from the ``tasks_order`` index alone).
_READY = "SELECT seq FROM tasks WHERE queue = ? AND state = 'pending' ORDER BY sort_key, seq LIMIT ?"
_CLAIM_BY_COUNT: dict[int, str] = {}
#: When a queue's first scheduled task and its first retry fall due (``tasks_order``: one index step
#: each); parameters ``queue, queue``.
_NEXT_DUE = (
    "SELECT (SELECT min(sort_key) FROM tasks WHERE queue = ? AND state = 'scheduled'),"
    " (SELECT min(sort_key) FROM tasks WHERE queue = ? AND state = 'retry')"
)
#: Claimed tasks read whole (append ``(?, ...)``): those the claim's ``RETURNING`` flagged.
_CLAIMED_WHOLE = f"SELECT {CLAIMED} FROM tasks WHERE seq IN"

#: The lease of each active task among some ids: ``id, seq, queue, lease_token`` (append ``(?, ...)``).
_FENCES = "SELECT id, seq, queue, lease_token FROM tasks WHERE state = 'active' AND id IN"

# the completion rule's values: places in a completion's row ``(now, keep_until, result, seq)``
_NOW: Any = Param(0)
_KEEP_UNTIL: Any = Param(1)
_RESULT: Any = Param(2)
_COMPLETION_SET, _COMPLETION_PLACES = set_clause(transitions.completed(_NOW, _KEEP_UNTIL, _RESULT))
#: A completion, the columns ``transitions.completed`` sets; its parameters are a completion's row
#: ``(now, keep_until, result, seq)`` put in their order by ``_COMPLETE_ROW``.
_COMPLETE = f"UPDATE tasks SET {_COMPLETION_SET}, sort_key = ? WHERE seq = ?"
_COMPLETE_ROW = operator.itemgetter(*_COMPLETION_PLACES, 0, 3)


#: A completion without retention (``transitions.deleted_at_settle``): ``(seq,)``.
_DELETE = "DELETE FROM tasks WHERE seq = ?"


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


# -- producing ---------------------------------------------------------------------------------


def enqueue(tx: Tx, tasks: Sequence[NewTask], now: float) -> list[str | None]:
    """Insert ``tasks`` (duplicates skipped); raises QueueFull before writing any of them.

    A single task without a unique key reads whether anyone listens for events and its queue's
    settings in one statement (a one-task enqueue is a handful of statements in all, and each counts
    against a bare commit).
    """
    if len(tasks) == 1 and tasks[0].unique_key is None:
        task = tasks[0]
        listening, known, max_size, concurrency, aging, paused = tx.conn.execute(
            _PRELUDE, (time.time(), tx.origin, task.queue)
        ).fetchone()
        tx.listening = listening == 1
        if max_size is None:  # unbounded: nothing more to read, and no settings object to build
            return [_enqueue_one(tx, task, now, aging, known)]
        tx.know_settings(task.queue, (max_size, concurrency, aging, paused))
    existing: set[str] = set()
    stale: set[str] = set()  # ids held by a task past its retention: replaced (``clean`` deletes the others)
    for chunk in _chunks(list({t.id for t in tasks})):
        cursor = tx.execute(f"SELECT id, keep_until FROM tasks WHERE id IN ({_marks(chunk)})", chunk)
        for task_id, keep_until in cursor:
            (stale if keep_until is not None and keep_until <= now else existing).add(task_id)
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
        row = _row(task, now, aging[task.queue])
        rows.append(row)
        if task.unique_key is not None and task.unique_until is not None:
            uniques.append((task.unique_key, task.id, task.unique_until))
        events.append((task.id, None, row[3], task.queue, now))
        tx.note_due(task.queue, row[9], now)
    if rows:
        replaced = [task.id for task, dup in zip(tasks, results, strict=True) if dup is None and task.id in stale]
        for chunk in _chunks(replaced):
            tx.execute(f"DELETE FROM tasks WHERE id IN ({_marks(chunk)})", chunk)
        new_queues = [(queue,) for queue in adding if not tx.queue_known(queue)]
        if new_queues:
            tx.conn.executemany("INSERT OR IGNORE INTO queues (name) VALUES (?)", new_queues)
        tx.conn.executemany(_INSERT_TASK, rows)
        if uniques:
            tx.conn.executemany("INSERT OR REPLACE INTO uniques (key, task_id, until) VALUES (?, ?, ?)", uniques)
    return results


def _enqueue_one(tx: Tx, task: NewTask, now: float, aging: float | None, known: int) -> str | None:
    """One task without a unique key into an unbounded queue (``aging`` its setting, ``known`` whether
    it has its row in ``queues``): the insert itself detects a duplicate id."""
    row = _row(task, now, aging)
    tx.flush()
    conn = tx.conn
    if conn.execute(_INSERT_NEW_TASK, row).rowcount == 0:
        # the id is taken: a duplicate, unless its task is past retention (then replaced)
        if conn.execute(_DELETE_STALE, (task.id, now)).rowcount == 0:
            return task.id
        conn.execute(_INSERT_TASK, row)
    if not known:
        conn.execute("INSERT OR IGNORE INTO queues (name) VALUES (?)", (task.queue,))
    tx.events.append((task.id, None, row[3], task.queue, now))
    tx.note_due(task.queue, row[9], now)
    return None


def _row(task: NewTask, now: float, aging: float | None) -> tuple[Any, ...]:
    """The ``_INSERT_TASK`` parameters of a new task (its state is the fourth, its due time the tenth)."""
    due = transitions.due_after(task.run_at, now)
    if due is None:
        state, key = _PENDING, ready_key(task.priority, now, aging)
    else:
        state, key = _SCHEDULED, due
    return (
        task.id, task.name, task.queue, state, task.payload, task.options, task.priority, now,
        now if due is None else due, due, task.expires_at, task.unique_key, now, key,
    )  # fmt: skip


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


def claim(tx: Tx, queues: Sequence[str], now: float, lease_for: float, limit: int) -> ClaimedRows:
    """Claim up to ``limit`` tasks, queue by queue, each in its pending order.

    The sweep first archives every pending task past ``expires_at`` (``reap``), so what is pending
    after it can be claimed as it is: one index read picks a queue's tasks and one ``UPDATE ...
    RETURNING`` activates them all, reading back the few columns a fresh task has (``rows.FRESH``);
    the rare task with more to it is read whole by one more statement. The returned rows come in no
    particular order; they are put back in the order the index gave, and made into records only after
    the commit (``ClaimedRows.records``). A lease token is a random base (``os.urandom``, fork-safe)
    plus the row's ``seq``, as on Redis.
    """
    if tx.anything_due(now):
        tx.promote(now, None)
        tx.reap(now, None)
    claimed = ClaimedRows()
    conn = tx.conn
    events = tx.events
    base = ""
    for queue in queues:
        if claimed.count >= limit:
            break
        settings = tx.settings(queue)
        if settings.paused:
            continue
        need = limit - claimed.count
        if settings.concurrency is not None:
            need = min(need, settings.concurrency - tx.count(queue, (_S.ACTIVE,)))
            if need <= 0:
                continue
        tx.flush()
        seqs = [row[0] for row in conn.execute(_READY, (queue, need))]
        if not seqs:
            continue
        base = base or secrets.token_hex(12) + "-"
        order = {seq: i for i, seq in enumerate(seqs)}
        expires = now + lease_for
        rows = conn.execute(_claim_sql(len(seqs)), (now, now, base, expires, *seqs)).fetchall()
        rows.sort(key=lambda row: order[row[0]])
        more = [row[0] for row in rows if row[-1]]
        whole = {row[0]: row for row in conn.execute(f"{_CLAIMED_WHOLE} ({_marks(more)})", more)} if more else {}
        claimed.add(rows, whole, now, expires)
        events.extend([(row[1], _PENDING, _ACTIVE, queue, now) for row in rows])
    return claimed


def claim_noting_due(
    tx: Tx, queues: Sequence[str], now: float, lease_for: float, limit: int
) -> tuple[ClaimedRows, float | None]:
    """:func:`claim`, and when it took less than ``limit`` (its consumer may go idle), when the next
    task of ``queues`` falls due (:func:`next_due`): the consumer's wait for work ends then."""
    claimed = claim(tx, queues, now, lease_for, limit)
    return claimed, next_due(tx, queues) if claimed.count < limit else None


def next_due(tx: Tx, queues: Sequence[str]) -> float | None:
    """When the first scheduled or retry task of ``queues`` falls due (None: there is none)."""
    tx.flush()
    execute = tx.conn.execute
    found = [due for queue in queues for due in execute(_NEXT_DUE, (queue, queue)).fetchone() if due is not None]
    return min(found, default=None)


def _claim_sql(count: int) -> str:
    sql = _CLAIM_BY_COUNT.get(count)
    if sql is None:
        sql = _CLAIM_BY_COUNT[count] = (
            "UPDATE tasks SET state = 'active', attempts = attempts + 1, started_at = ?, sort_key = ?,"
            " lease_token = ? || seq, lease_expires_at = ?, cancel_requested = 0"
            f" WHERE seq IN ({','.join('?' * count)}) RETURNING {FRESH}"
        )
    return sql


def settle(tx: Tx, outcomes: Sequence[Outcome], now: float) -> list[bool]:
    """Apply ``outcomes`` (each fenced by its lease token) in order; True for each one applied.

    One read fetches the fence of every task in the batch; completions (nearly every outcome) are
    then written by one prepared ``UPDATE`` executed for the whole batch, with no record built, and
    those without retention deleted by one ``DELETE`` (``transitions.deleted_at_settle``). The other
    kinds go through the record transitions of :class:`Tx`.
    """
    fences: dict[str, tuple[str, int, str, str | None]] = {}
    for chunk in _chunks(list({o.task_id for o in outcomes})):
        fences.update({row[0]: row for row in tx.execute(f"{_FENCES} ({_marks(chunk)})", chunk)})
    applied: list[bool] = []
    tally = Tally()
    completed: list[tuple[Any, ...]] = []
    gone: list[tuple[int]] = []  # completions without retention: deleted, not updated
    done: dict[str, int] = {}  # completions per queue, counted into ``tally`` at the end
    events = tx.events
    for outcome in outcomes:
        task_id = outcome.task_id
        fence = fences.get(task_id)
        if fence is None or fence[3] != outcome.token:
            applied.append(False)
            continue
        del fences[task_id]  # settled: a second outcome for it in this batch finds no lease
        _, seq, queue, _ = fence
        if outcome.kind == "complete":
            keep_until = transitions.kept_until(outcome, now, tx.policy)
            if transitions.deleted_at_settle(keep_until, now):
                gone.append((seq,))
            else:
                completed.append((now, keep_until, outcome.result, seq))
            events.append((task_id, _ACTIVE, _COMPLETED, queue, now))
            done[queue] = done.get(queue, 0) + 1
        else:
            _complete(tx, completed, gone)  # first: an outcome the rules refuse still leaves the earlier ones applied
            stored = tx.rows("WHERE seq = ?", (seq,))[0]
            try:
                tx.change(stored, transitions.settled(stored.rec, outcome, now, tx.policy), now)
            except ValueError:
                _count(tx, tally, done, now)  # and the earlier ones stay counted
                raise
            tally.add(queue, outcome.kind, now)
        applied.append(True)
    _complete(tx, completed, gone)
    _count(tx, tally, done, now)
    return applied


def _complete(tx: Tx, completed: list[tuple[Any, ...]], gone: list[tuple[int]]) -> None:
    """Write the completions collected: ``completed`` rows ``(now, keep_until, result, seq)``, and the
    ``seq`` of each task deleted instead (``gone``, ``transitions.deleted_at_settle``)."""
    if completed or gone:
        tx.flush()
        if completed:
            tx.conn.executemany(_COMPLETE, map(_COMPLETE_ROW, completed))
            completed.clear()
        if gone:
            tx.conn.executemany(_DELETE, gone)
            gone.clear()


def _count(tx: Tx, tally: Tally, done: dict[str, int], now: float) -> None:
    for queue, count in done.items():
        tally.add(queue, "complete", now, count)
    for row in tally.rows():
        tx.execute(_COUNT, (row.minute, row.queue, row.completed, row.retried, row.archived))


def extend(tx: Tx, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
    found = tx.rows("WHERE id = ?", (task_id,))
    if not found or found[0].rec.state is not _S.ACTIVE or found[0].rec.lease_token != token:
        return None
    tx.change(found[0], transitions.extended(now + lease_for), now)
    return LeaseStatus(now + lease_for, found[0].rec.cancel_requested)


# -- maintenance -------------------------------------------------------------------------------


def clean(tx: Tx, now: float, limit: int, max_archived: int) -> int:
    """Delete tasks past retention, then the oldest archived beyond ``max_archived`` per queue."""
    removed = tx.clean_retained(now, limit)
    queues = [row[0] for row in tx.execute("SELECT name FROM queues ORDER BY name")]  # the reference's order
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
