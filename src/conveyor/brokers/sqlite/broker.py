"""``sqlite:///path.db``: the embedded, durable broker that several processes on one machine share.

Semantics are exactly the reference broker's (``memory.py``); this module only decides *how* each
call touches the file: every mutating call is one ``BEGIN IMMEDIATE`` transaction (a batch claim,
a batch enqueue, a batch settle: one transaction each), every read is one snapshot. See ``db`` for
connections and busy handling, ``schema`` for the layout, ``events`` for cross-process events.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from conveyor.brokers.base import EventCallback, Finding
from conveyor.brokers.declarations import decode_declaration, encode_declaration
from conveyor.brokers.sqlite import admin, inbox, ops
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.db import Database
from conveyor.brokers.sqlite.events import EventHub
from conveyor.brokers.sqlite.idle import IdleWaits
from conveyor.brokers.sqlite.rows import ClaimedRows
from conveyor.brokers.sqlite.schema import SCHEMA_VERSION
from conveyor.brokers.sqlite.tx import Tx, due_soon
from conveyor.errors import BrokerError, ConveyorError, InvalidTransition
from conveyor.history import QueueMinute
from conveyor.model import (
    BrokerPolicy,
    Event,
    LeaseStatus,
    NewTask,
    Outcome,
    QueueInfo,
    QueueSettings,
    TaskDeclaration,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = ["SQLiteBroker"]

T = TypeVar("T")

_PENDING = TaskState.PENDING.value
_ACTIVE = TaskState.ACTIVE.value

#: A broker trims the events table after writing this many events.
_TRIM_EVERY = 10_000


@dataclass(frozen=True, slots=True)
class _Failed:
    """A domain error (QueueFull, TaskNotFound, ...) raised inside a transaction that still commits."""

    error: Exception


class SQLiteBroker:
    """A broker on one SQLite file in WAL mode; thread-safe, and safe to share between processes."""

    def __init__(self, config: SQLiteConfig, policy: BrokerPolicy | None = None) -> None:
        self.config = config
        self.policy = policy or BrokerPolicy()
        self._db = Database(config)
        self._origin = secrets.token_hex(8)
        self._events = EventHub(self._db, self._origin, config.poll_interval)
        self._written_since_trim = 0
        self._idle = IdleWaits(config.path, self._db.data_version)  # wake-up FIFOs, idle waits

    @classmethod
    def from_url(cls, url: str, policy: BrokerPolicy) -> SQLiteBroker:
        """``sqlite:///relative.db`` or ``sqlite:////abs/path.db``, options as in ``SQLiteConfig``."""
        return cls(SQLiteConfig.from_url(url), policy)

    def __repr__(self) -> str:
        return f"SQLiteBroker({self.config.path!r})"

    # -- transactions --------------------------------------------------------------------------

    def _write(self, fn: Callable[[Tx], T], durable: bool = True) -> T:
        """Run ``fn`` in one write transaction, then deliver its events to this process's subscribers.

        ``durable=False`` (a claim settling nothing): under ``synchronous=FULL`` it commits without a
        sync of its own (``Database.write``); a power cut may undo it, which only makes the tasks it
        claimed pending again, as if never claimed (at least once, as ever).

        A domain error raised by ``fn`` (QueueFull, TaskNotFound, InvalidTransition, ValueError) is
        raised before ``fn`` wrote anything of its own; the transaction still commits what came
        before (housekeeping, earlier items of a batch), exactly like the reference broker.
        """
        last: list[Tx] = []
        freed: set[str] = set()  # queues with a concurrency limit where a task left its slot

        def attempt(conn: sqlite3.Connection) -> T | _Failed:
            tx = Tx(conn, self.policy, self._origin)
            last[:] = [tx]
            freed.clear()
            result: T | _Failed
            try:
                result = fn(tx)
            except BrokerError:
                raise
            except (ConveyorError, ValueError) as exc:
                result = _Failed(exc)
            self._trim_events(tx, tx.save_events(self._origin))
            left = {event[3] for event in tx.events if event[1] == _ACTIVE and event[2] != _ACTIVE}
            freed.update(queue for queue in left if tx.settings(queue).concurrency is not None)
            return result

        outcome = self._db.write(attempt, durable)
        events, soon = last[0].events, last[0].due_soon
        # after the commit, so a consumer it wakes sees the task; a freed slot makes a pending task
        # claimable too, and a task falling due soon may do so before its waiter's next claim (idle
        # waiters wake only on rings and when a task they know of falls due: ``wait_for_work``)
        for queue in {event[3] for event in events if event[2] == _PENDING} | freed | soon:
            self._idle.bell(queue).ring()
        if events and self._events.active:
            self._events.deliver([Event(*event) for event in events])
        if isinstance(outcome, _Failed):
            raise outcome.error
        return outcome

    def _trim_events(self, tx: Tx, written: int) -> None:
        self._written_since_trim += written
        if self._written_since_trim >= _TRIM_EVERY:
            self._written_since_trim = 0
            tx.execute("DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?", (self.config.events_kept,))

    # -- producing -----------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[str | None]:
        batch = list(tasks)
        if len(batch) == 1 and (task := batch[0]).fresh and task.unique_key is None:
            state = self._db.write(lambda conn: inbox.append(conn, task, now, self._origin), fold=False)
            if state is not None:  # appended to the inbox (inbox.py): what _write does after a commit
                if state == _PENDING or due_soon(task.run_at, now):
                    self._idle.bell(task.queue).ring()
                if self._events.active:
                    self._events.deliver([Event(task.id, None, state, task.queue, now)])
                return [None]
            # a queue with max_size, or somebody listens: in a transaction of its own, as the others
        return self._write(lambda tx: ops.enqueue(tx, batch, now))

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        names = list(queues)
        self._idle.claiming()  # before the claim: no commit after it goes unseen
        claimed, due = self._write(lambda tx: ops.claim_noting_due(tx, names, now, lease_for, limit), durable=False)
        self._idle.claimed(due, now)
        records = claimed.records()  # after the commit: the write lock is not held for it
        if len(records) >= limit:  # there may be more: a ring wakes one idle consumer, so pass it on
            for queue in {record.queue for record in records}:
                self._idle.bell(queue).ring()
        return records

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` s until a commit may have made a task of ``queues`` pending, or one
        of their tasks falls due (``idle.py``): a ring of their wake-up FIFOs, the due time this
        thread's last claim read, ``PRAGMA data_version`` for writers that do not ring, or an interrupt
        (:meth:`interrupt_waits`). True is a hint."""
        return self._idle.wait(queues, timeout)

    def interrupt_waits(self) -> None:
        """``InterruptsWaits``: end the waits in progress in this process (a worker stopping) at once, and
        the next of each thread that claimed before (``halts.py``)."""
        self._idle.interrupt()

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        batch = list(outcomes)
        return self._write(lambda tx: ops.settle(tx, batch, now))

    def settle_and_claim(
        self, outcomes: Sequence[Outcome], queues: Sequence[str], now: float, lease_for: float, limit: int
    ) -> tuple[list[bool], list[TaskRecord]]:
        """``settle`` then ``claim`` in one transaction: one commit (one disk sync under FULL) for both."""
        batch, names = list(outcomes), list(queues)

        def run(tx: Tx) -> tuple[list[bool], tuple[ClaimedRows, float | None]]:
            applied = ops.settle(tx, batch, now)
            return applied, ops.claim_noting_due(tx, names, now, lease_for, limit)

        self._idle.claiming()  # as in claim()
        applied, (claimed, due) = self._write(run, durable=bool(batch))  # a claim alone need not be synced
        self._idle.claimed(due, now)
        return applied, claimed.records()

    def extend(self, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
        return self._write(lambda tx: ops.extend(tx, task_id, token, now, lease_for))

    # -- maintenance ---------------------------------------------------------------------------

    def promote(self, now: float, limit: int = 1000) -> int:
        return self._write(lambda tx: tx.promote(now, limit))

    def reap(self, now: float, limit: int = 1000) -> int:
        def run(tx: Tx) -> int:
            tx.promote(now, None)
            return tx.reap(now, limit)

        return self._write(run)

    def clean(self, now: float, limit: int = 1000) -> int:
        def run(tx: Tx) -> int:
            removed = ops.clean(tx, now, limit, self.policy.max_archived)
            self._written_since_trim = _TRIM_EVERY  # the janitor also bounds the events table
            return removed

        return self._write(run)

    # -- reading -------------------------------------------------------------------------------

    def get(self, task_id: str, now: float) -> TaskRecord | None:
        return self._db.read(lambda conn: admin.get(conn, task_id, now))

    def list_tasks(
        self, queue: str, state: TaskState, now: float, offset: int = 0, limit: int = 100
    ) -> list[TaskRecord]:
        wanted = TaskState(state)
        return self._db.read(lambda conn: admin.list_tasks(conn, queue, wanted, now, offset, limit))

    def queues(self, now: float) -> list[QueueInfo]:
        return self._db.read(lambda conn: admin.queues(conn, now))

    def history(self, first: int, last: int) -> list[QueueMinute]:
        sql = "SELECT queue, minute, completed, retried, archived FROM history WHERE minute BETWEEN ? AND ?"
        return self._db.read(lambda conn: [QueueMinute(*row) for row in conn.execute(sql, (first, last))])

    # -- queue settings ------------------------------------------------------------------------

    def configure_queue(self, settings: QueueSettings) -> None:
        self._write(lambda tx: admin.configure_queue(tx, settings))
        self._idle.bell(settings.name).ring()  # a higher concurrency limit may make pending tasks claimable

    def set_paused(self, queue: str, paused: bool) -> None:
        self._write(lambda tx: admin.set_paused(tx, queue, paused))
        if not paused:
            self._idle.bell(queue).ring()  # its pending tasks are claimable again

    def forget_queue(self, queue: str) -> int | None:
        def forget(tx: Tx) -> int | None:
            held = int(tx.execute("SELECT count(*) FROM tasks WHERE queue = ?", (queue,)).fetchone()[0])
            if held:
                return held
            return 0 if tx.execute("DELETE FROM queues WHERE name = ?", (queue,)).rowcount else None

        return self._write(forget)

    # -- admin ---------------------------------------------------------------------------------

    def run_now(self, task_id: str, now: float) -> None:
        self._write(lambda tx: admin.run_now(tx, task_id, now))

    def archive(self, task_id: str, now: float) -> None:
        self._write(lambda tx: admin.archive(tx, task_id, now))

    def cancel(self, task_id: str, now: float) -> TaskState:
        return self._write(lambda tx: admin.cancel(tx, task_id, now))

    def delete(self, task_id: str, now: float) -> None:
        self._write(lambda tx: admin.delete(tx, task_id, now))

    def purge(self, queue: str, state: TaskState, now: float, limit: int | None = None) -> int:
        wanted = TaskState(state)
        if wanted is TaskState.ACTIVE:
            raise InvalidTransition("cannot purge active tasks; cancel them first")
        return self._write(lambda tx: admin.purge(tx, queue, wanted, now, limit))

    # -- workers and events ----------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo, now: float, ttl: float) -> None:
        data = asdict(info)
        data["last_seen"] = now
        text = json.dumps(data)
        self._write(
            lambda tx: tx.execute(
                "INSERT OR REPLACE INTO workers (id, info, until) VALUES (?, ?, ?)", (info.id, text, now + ttl)
            )
        )

    def unregister_worker(self, worker_id: str) -> None:
        def forget(tx: Tx) -> None:
            tx.execute("DELETE FROM workers WHERE id = ?", (worker_id,))
            tx.execute("DELETE FROM worker_commands WHERE id = ?", (worker_id,))

        self._write(forget)

    def command_worker(self, worker_id: str, command: str, now: float, ttl: float) -> None:
        self._write(lambda tx: admin.command_worker(tx, worker_id, command, now + ttl))

    def worker_command(self, worker_id: str, now: float) -> str | None:
        return self._db.read(lambda conn: admin.worker_command(conn, worker_id, now))

    def workers(self, now: float) -> list[WorkerInfo]:
        rows = self._db.read(
            lambda conn: conn.execute("SELECT info FROM workers WHERE until > ? ORDER BY id", (now,)).fetchall()
        )
        return [_worker(json.loads(row[0])) for row in rows]

    def declare_tasks(self, declarations: Sequence[TaskDeclaration]) -> None:
        rows = [(d.name, encode_declaration(d)) for d in declarations]
        sql = "INSERT OR REPLACE INTO declared (name, declaration) VALUES (?, ?)"
        self._write(lambda tx: tx.conn.executemany(sql, rows))

    def declared_tasks(self, names: Sequence[str] | None = None) -> dict[str, TaskDeclaration]:
        def read(conn: sqlite3.Connection) -> list[Any]:
            if names is None:
                return conn.execute("SELECT declaration FROM declared ORDER BY name").fetchall()
            marks = ",".join("?" * len(names))
            return conn.execute(f"SELECT declaration FROM declared WHERE name IN ({marks})", list(names)).fetchall()

        found = [decode_declaration(row[0]) for row in self._db.read(read)] if names is None or names else []
        return {d.name: d for d in found}

    # -- for ``conveyor doctor`` and a starting worker ---------------------------------------------

    def preflight(self) -> list[Finding]:
        """``ChecksServer``: the file's journal mode (WAL: readers never block the writer) and layout version."""
        return [
            _expected("journal_mode", self.journal_mode(), "wal"),
            _expected("schema_version", str(self.schema_version()), str(SCHEMA_VERSION)),
        ]

    def journal_mode(self) -> str:
        """The file's journal mode as SQLite reports it (``wal`` once opened by Conveyor)."""
        return str(self._db.read(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0]))

    def schema_version(self) -> int:
        """The file's layout version (``PRAGMA user_version``; ``schema.SCHEMA_VERSION`` once migrated)."""
        return int(self._db.read(lambda conn: conn.execute("PRAGMA user_version").fetchone()[0]))

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Deliver every transition: this broker's at once, other processes' within ``poll_interval``."""
        return self._events.subscribe(callback)

    def close(self) -> None:
        """Stop the event poller and close every connection. Idempotent; a later call reopens lazily."""
        self._events.close()
        self._idle.close()
        self._db.close()


def _worker(data: dict[str, Any]) -> WorkerInfo:
    data["queues"] = tuple(data["queues"])
    data["running"] = tuple(data["running"])
    return WorkerInfo(**data)


def _expected(name: str, found: str, wanted: str) -> Finding:
    ok = found.lower() == wanted
    return Finding(name, ok, found if ok else f"{found} (expected {wanted})")
