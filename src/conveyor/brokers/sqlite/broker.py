"""``sqlite:///path.db``: the embedded, durable broker that several processes on one machine share.

Semantics are exactly the reference broker's (``memory.py``); this module only decides *how* each
call touches the file: every mutating call is one ``BEGIN IMMEDIATE`` transaction (a batch claim,
a batch enqueue, a batch settle: one transaction each), every read is one snapshot. See ``db`` for
connections and busy handling, ``schema`` for the layout, ``events`` for cross-process events.
"""

from __future__ import annotations

import json
import math
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from conveyor.brokers.base import EventCallback, Finding
from conveyor.brokers.declarations import decode_declaration, encode_declaration
from conveyor.brokers.sqlite import admin, ops
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.db import Database
from conveyor.brokers.sqlite.events import EventHub
from conveyor.brokers.sqlite.schema import SCHEMA_VERSION
from conveyor.brokers.sqlite.tx import Tx
from conveyor.brokers.sqlite.wake import Doorbell, wait_any, wake_suffix
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

#: How often an idle consumer checks the file for commits by other connections (``wait_for_work``):
#: without a usable wake-up FIFO, and with one (then only for writers that do not ring it: other
#: tools, versions before the FIFOs per queue).
_WAKE_CHECK = 0.002
_WAKE_CHECK_RUNG = 0.5

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
        self._bells: dict[str, Doorbell] = {}  # the wake-up FIFO of each queue this broker used
        self._bells_lock = threading.Lock()
        self._written_since_trim = 0
        self._seen = threading.local()  # data_version and time before each thread's last claim

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
            self._bell(queue).ring()
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
        return self._write(lambda tx: ops.enqueue(tx, batch, now))

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        names = list(queues)
        self._note_claim()  # before the claim: no commit after it goes unseen
        records, due = self._write(lambda tx: ops.claim_noting_due(tx, names, now, lease_for, limit), durable=False)
        self._seen.due_in = None if due is None else due - now
        if len(records) >= limit:  # there may be more: a ring wakes one idle consumer, so pass it on
            for queue in {record.queue for record in records}:
                self._bell(queue).ring()
        return records

    def _note_claim(self) -> None:
        """What ``wait_for_work`` compares with: this thread's ``data_version`` and time before its claim
        (and, once it is made, how long after it the claim's queues have a task falling due)."""
        self._seen.at = time.monotonic()
        self._seen.version = self._db.data_version()
        self._seen.due_in = None

    def _bell(self, queue: str) -> Doorbell:
        bell = self._bells.get(queue)
        if bell is None:
            with self._bells_lock:
                bell = self._bells.setdefault(queue, Doorbell(self.config.path, wake_suffix(queue)))
        return bell

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` s until a commit may have made a task of ``queues`` pending, or one
        of their tasks falls due.

        Sleeps on the wake-up FIFOs of ``queues`` (``wake``), which a broker rings after a commit that
        made a task of that queue pending, or scheduled or retried it within a minute (``tx``), so an
        idle worker wakes within a scheduler hop of an enqueue. A commit that rang none of them
        (another process settling its own work) does not wake it: while other processes drain, an
        idle worker's every wake-up would be a claim that finds nothing, a write transaction competing
        for the lock. A task falls due with no commit at all: this thread's last claim read when the
        first scheduled or retry task of its queues does (``ops.next_due``), and the wait ends then,
        so the next claim takes it at its due time, not at the caller's next poll. Writers that do not
        ring (other tools, versions before the FIFOs per queue) are seen by ``PRAGMA data_version`` (a
        read of shared memory, no I/O, no lock), compared with its value before this thread's last
        claim every ``_WAKE_CHECK_RUNG`` s; at once when a FIFO was not yet listened to at that claim
        (a ring then may have found no reader); every ``_WAKE_CHECK`` s where there is no FIFO. True
        is a hint.
        """
        bells = [self._bell(queue) for queue in queues]
        rung = all([bell.listen() for bell in bells])  # before the check: a ring after it is not lost
        seen = getattr(self._seen, "version", None)
        if seen is None:
            seen = self._db.data_version()
        claimed_at = getattr(self._seen, "at", None)
        due_in = getattr(self._seen, "due_in", None)
        now = time.monotonic()
        deadline = now + timeout
        due_at = claimed_at + due_in if claimed_at is not None and due_in is not None else math.inf
        end = min(deadline, due_at)
        heard = rung and claimed_at is not None and all(bell.heard_since(claimed_at) for bell in bells)
        check_at = now + _WAKE_CHECK_RUNG if heard else now
        while True:
            now = time.monotonic()
            if now >= check_at:
                if self._db.data_version() != seen:
                    return True
                check_at = now + (_WAKE_CHECK_RUNG if rung else _WAKE_CHECK)
            remaining = end - now
            if remaining <= 0:
                if due_at > deadline:
                    return False
                self._seen.due_in = None  # once: a caller that waits again before claiming sleeps
                return True
            if not rung:
                time.sleep(min(check_at - now, remaining))
            elif wait_any(bells, min(check_at - now, remaining)):
                return True

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        batch = list(outcomes)
        return self._write(lambda tx: ops.settle(tx, batch, now))

    def settle_and_claim(
        self, outcomes: Sequence[Outcome], queues: Sequence[str], now: float, lease_for: float, limit: int
    ) -> tuple[list[bool], list[TaskRecord]]:
        """``settle`` then ``claim`` in one transaction: one commit (one disk sync under FULL) for both."""
        batch, names = list(outcomes), list(queues)

        def run(tx: Tx) -> tuple[list[bool], tuple[list[TaskRecord], float | None]]:
            applied = ops.settle(tx, batch, now)
            return applied, ops.claim_noting_due(tx, names, now, lease_for, limit)

        self._note_claim()  # as in claim()
        applied, (records, due) = self._write(run, durable=bool(batch))  # a claim alone need not be synced
        self._seen.due_in = None if due is None else due - now
        return applied, records

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
        self._bell(settings.name).ring()  # a higher concurrency limit may make pending tasks claimable

    def set_paused(self, queue: str, paused: bool) -> None:
        self._write(lambda tx: admin.set_paused(tx, queue, paused))
        if not paused:
            self._bell(queue).ring()  # its pending tasks are claimable again

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
        with self._bells_lock:
            bells, self._bells = list(self._bells.values()), {}
        for bell in bells:
            bell.close()
        self._db.close()


def _worker(data: dict[str, Any]) -> WorkerInfo:
    data["queues"] = tuple(data["queues"])
    data["running"] = tuple(data["running"])
    return WorkerInfo(**data)


def _expected(name: str, found: str, wanted: str) -> Finding:
    ok = found.lower() == wanted
    return Finding(name, ok, found if ok else f"{found} (expected {wanted})")
