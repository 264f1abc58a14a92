"""Connections to one SQLite file: opening checks, one connection per thread, busy waits, group commits.

Each thread gets its own connection (reads never wait for each other; a WAL reader never blocks a
writer), closed when that thread ends (its thread-local slot goes, and a finalizer closes it) or when
the broker closes, whichever comes first: a worker whose threads come and go holds no stale file
handles. Every ``sqlite3`` exception leaves here as a :mod:`conveyor.errors` type.

**Writes of one process** are serialized by a process-local lock, so its threads queue up in Python
instead of spinning in SQLite's busy handler, and the writes that queued up while one ran or waited
for the file are then made in *one* transaction, each in a savepoint of its own (a group commit: a
worker's claim and its acker's settle, queued together behind another process's transaction, share
one commit, one WAL sync under ``synchronous=FULL``). A write that fails rolls back its own savepoint
only; a busy file or a failed commit retries or fails the whole group.

**Writers of other processes** meet ``SQLITE_BUSY`` (SQLite's own busy handler is off: it sleeps 1,
2, 5 ms, while the lock is held for well under a millisecond, and with several processes on the
file its waiters kept losing the lock to busy ones). A writer that finds the file locked sleeps on
the ``<path>-turn`` FIFO (``wake.Doorbell``), which every writer rings as its write transaction ends,
so the next writer tries within a scheduler hop of the commit; one ring wakes one waiter. It retries
the whole transaction until ``busy_timeout`` has passed, then raises ``BrokerUnavailable``. A writer
that does not ring (another tool; a process killed mid-transaction, whose lock the kernel releases)
is covered by the waits' timeouts: short, jittered and growing to ``_RETRY_MAX``. A writer waiting
for its turn marks itself (``Doorbell.queue_up``), and a writer of another process about to begin
lets it go first, for at most ``_STEP_ASIDE``, once it has seen it waiting for ``_OVERTAKE``: else the
writer that just rang, still running, takes the lock again before the one it woke has run, and a
worker's claim can wait behind a producer's back-to-back enqueues for as long as they last.

**Writes that need no sync of their own** (``write(fn, durable=False)``: a claim that settles
nothing) commit at ``synchronous=NORMAL`` when the file's setting is ``FULL`` or ``EXTRA``: the
setting is per connection, switched before ``BEGIN`` (SQLite refuses it inside a transaction) and
switched back before the next durable write. Such a commit still survives the death of any process
(it is in the WAL, which the OS holds); a power cut may undo it, which leaves the file as it was
before it, and the next synced commit (an enqueue, a settle) syncs it with its own frames. A group
commit is durable if any of its writes is.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from conveyor.brokers.sqlite import inbox
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.failures import is_busy, translate
from conveyor.brokers.sqlite.groups import Write, apply_group
from conveyor.brokers.sqlite.schema import check_version, migrate, stored_version
from conveyor.brokers.sqlite.wake import Doorbell
from conveyor.errors import BrokerError, BrokerUnavailable, ConfigurationError, SchemaError

__all__ = ["Database"]

log = logging.getLogger("conveyor.brokers.sqlite")

T = TypeVar("T")

_RETRY_FIRST = 0.002  # seconds: the first wait for a locked file (a ring ends it sooner)
_RETRY_MAX = 0.01
_STEP_ASIDE = 0.005  # seconds: the longest a writer lets waiting writers of other processes go first
_OVERTAKE = 0.005  # seconds: how long a writer goes on before it lets them go first
_STEP = 0.0001
#: The ``synchronous`` settings under which a write that needs no sync of its own commits at ``NORMAL``.
_LOWERED = ("FULL", "EXTRA")


class Database:
    """One SQLite file, opened (created, checked, migrated) at construction."""

    def __init__(self, config: SQLiteConfig) -> None:
        self.config = config
        self.path = config.path
        self.write_lock = threading.Lock()
        self._queued: list[Write] = []  # writes waiting for write_lock, taken by whoever holds it
        self._queued_lock = threading.Lock()
        self._turn = Doorbell(config.path, "-turn")
        self._local = threading.local()
        self._conns: set[sqlite3.Connection] = set()  # open ones; whoever takes one out closes it
        self._conns_lock = threading.RLock()  # re-entrant: a finalizer may run wherever a slot goes
        self._generation = 0
        self._lowers = config.synchronous in _LOWERED  # non-durable writes may skip their sync
        self._waiters_since: float | None = None  # when this process first saw another waiting (monotonic)
        self._check_path()
        try:
            self._retry(self._open_schema)
        except SchemaError:
            self.close()
            raise
        except BrokerUnavailable:
            self.close()
            raise
        except BrokerError as exc:  # the file is there but is not a database we can use
            self.close()
            raise ConfigurationError(f"cannot use {self.path} as a Conveyor SQLite database: {exc}") from None
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------

    def _check_path(self) -> None:
        path = os.path.abspath(self.path)
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            raise ConfigurationError(f"cannot open {self.path}: directory {directory} does not exist")
        if os.path.isdir(path):
            raise ConfigurationError(f"cannot open {self.path}: it is a directory")
        if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            raise ConfigurationError(f"cannot open {self.path}: the file is not readable and writable")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ConfigurationError(
                f"cannot open {self.path}: directory {directory} is read-only (SQLite needs it for the WAL)"
            )

    def _open_schema(self) -> None:
        conn = self.connection()
        check_version(stored_version(conn), self.path)  # read-only check first: a newer file stays untouched
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise ConfigurationError(f"cannot switch {self.path} to WAL mode (journal_mode is {mode!r})")
        migrate(conn, self.path)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=0.0,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
        except sqlite3.Error as exc:
            raise ConfigurationError(f"cannot open {self.path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 0")  # _retry waits, woken by the turn FIFO
            conn.execute(f"PRAGMA synchronous = {self.config.synchronous}")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA cache_size = -16000")
        except BaseException:
            conn.close()
            raise
        return conn

    # -- connections ---------------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, and again after :meth:`close`).

        A call that overlaps :meth:`close` (it began opening before ``close`` took the connections) gets
        ``BrokerError``, as a query running when ``close`` came would, and its new connection is closed at
        once: once ``close`` returns, only connections opened by calls made after it are open.
        """
        local = self._local
        slot: _Slot | None = getattr(local, "slot", None)
        generation = self._generation
        if slot is not None and slot.generation == generation:
            return slot.conn
        conn = self._connect()
        with self._conns_lock:
            current = self._generation == generation  # close() bumps it under this lock
            if current:
                self._conns.add(conn)
        if not current:
            _close(conn, self.path)
            raise BrokerError(f"{self.path} was closed while this thread was opening a connection")
        slot = _Slot(conn, generation)
        # When the thread ends, its thread-local values go, and with them the slot: close its connection.
        weakref.finalize(slot, _release, self._conns, self._conns_lock, conn, self.path)
        local.slot = slot  # outside the lock: the slot this replaces may be finalized right here
        return conn

    def close(self) -> None:
        """Close every connection this object opened (in any thread). Idempotent."""
        with self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
            self._generation += 1
        for conn in conns:
            _close(conn, self.path)
        self._turn.close()

    # -- transactions --------------------------------------------------------------------------

    def write(self, fn: Callable[[sqlite3.Connection], T], durable: bool = True, fold: bool = True) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction, retried whole while the file is busy; the
        writes of other threads queued meanwhile may share it (each in its own savepoint).

        ``durable=False``: losing this commit to a power cut is harmless (it only claims), so under
        ``FULL`` it commits without a sync of its own (see the module docstring). The transaction
        folds the inbox into ``tasks`` first (``inbox.py``), unless ``fold`` is False (an append to it)."""
        if self.write_lock.acquire(blocking=False):  # no other write of this process: try it alone first
            try:
                if not self._queued:
                    self._step_aside()
                    try:
                        return self._transaction(fn, "BEGIN IMMEDIATE", durable, fold)
                    except sqlite3.Error as exc:
                        if not is_busy(exc):
                            raise translate(exc, self.path) from exc
                return self._write_queued(fn, durable, fold)  # the file is busy: wait, then write with the others
            finally:
                self.write_lock.release()
        write = Write(fn, durable, fold)
        with self._queued_lock:
            self._queued.append(write)
        with self.write_lock:
            if not write.done:  # else the thread that held the lock before made it
                self._write_group()
        return write.outcome()  # type: ignore[return-value]

    def _write_queued(self, fn: Callable[[sqlite3.Connection], T], durable: bool, fold: bool) -> T:
        """Queue ``fn`` and make the queued writes together (write_lock held)."""
        write = Write(fn, durable, fold)
        with self._queued_lock:
            self._queued.append(write)
        self._write_group()
        return write.outcome()  # type: ignore[return-value]

    def _write_group(self) -> None:
        """Make every queued write in one transaction (write_lock held)."""
        group: list[Write] = []

        def attempt() -> None:
            with self._queued_lock:  # the ones queued while this thread waited for the file too
                group.extend(self._queued)
                self._queued.clear()
            if len(group) == 1:
                write = group[0]
                write.result = self._transaction(write.fn, "BEGIN IMMEDIATE", write.durable, write.fold)
                write.error = None
            else:
                durable = any(write.durable for write in group)
                self._transaction(lambda conn: apply_group(conn, group, self.path), "BEGIN IMMEDIATE", durable)

        try:
            self._retry(attempt, queue=True)
        except BaseException as exc:
            for write in group:
                write.result, write.error = None, exc
        for write in group:
            write.done = True

    def data_version(self) -> int:
        """``PRAGMA data_version`` of this thread's connection: it moves when another connection commits."""
        try:
            return int(self.connection().execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot: reads of tasks add the inbox's)."""
        return self._retry(lambda: self._transaction(fn, "BEGIN"))

    def _transaction(
        self, fn: Callable[[sqlite3.Connection], T], begin: str, durable: bool = True, fold: bool = True
    ) -> T:
        conn = self.connection()
        if self._lowers and begin != "BEGIN":
            slot: _Slot = self._local.slot  # set by connection()
            if slot.lowered == durable:  # switch: a durable write after a lowered one, or the reverse
                conn.execute(f"PRAGMA synchronous = {self.config.synchronous if durable else 'NORMAL'}")
                slot.lowered = not durable
        conn.execute(begin)
        try:
            if fold and begin != "BEGIN":
                inbox.fold(conn)
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:  # the original error matters more
                    log.debug("rollback on %s failed", self.path, exc_info=True)
            raise
        finally:
            if begin != "BEGIN":  # it held the write lock: the next writer waiting may go
                self._turn.ring()
        return result

    def _retry(self, fn: Callable[[], T], queue: bool = False) -> T:
        """Call ``fn`` until the file is not busy; ``queue``: a write, which marks itself as waiting for
        its turn while it waits (``_step_aside``)."""
        deadline = time.monotonic() + self.config.busy_timeout
        delay = _RETRY_FIRST
        queued = False
        try:
            while True:
                try:
                    return fn()
                except sqlite3.Error as exc:
                    if not is_busy(exc):
                        raise translate(exc, self.path) from exc
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise BrokerUnavailable(
                            f"{self.path} stayed locked by another connection for more than"
                            f" {self.config.busy_timeout:g}s (busy_timeout): {exc}"
                        ) from None
                    if queue and not queued:
                        self._turn.queue_up()
                        queued = True
                    self._pause(min(random.uniform(delay / 2, delay), remaining))
                    delay = min(delay * 2, _RETRY_MAX)
        finally:
            if queued:
                self._turn.leave_queue()

    def _step_aside(self) -> None:
        """Let writers of other processes that have waited for their turn since ``_OVERTAKE`` s go first,
        for at most ``_STEP_ASIDE`` (write_lock held)."""
        turn = self._turn
        if not turn.others_waiting():
            self._waiters_since = None
            return
        now = time.monotonic()
        if self._waiters_since is None:
            self._waiters_since = now
        if now - self._waiters_since < _OVERTAKE:
            # a turn after every write would make a busy writer wait for each of the other's commits;
            # overtaken a few ms, the waiter then does more in one (a worker claims what came meanwhile)
            return
        self._waiters_since = None
        deadline = now + _STEP_ASIDE
        while time.monotonic() < deadline:
            time.sleep(_STEP)  # the waiter ends its wait by taking the lock, and leaves the queue after
            if not turn.others_waiting():
                return

    def _pause(self, seconds: float) -> None:
        """Wait for the next writer's ring, at most ``seconds``; sleep instead where there is no FIFO."""
        started = time.monotonic()
        if not self._turn.wait(seconds):  # timed out, or at once: no FIFO (Windows, a file in its place)
            left = seconds - (time.monotonic() - started)
            if left > 0:
                time.sleep(left)


class _Slot:
    """One thread's connection, kept in the thread-local (a slot, so that its end can be watched)."""

    __slots__ = ("__weakref__", "conn", "generation", "lowered")

    def __init__(self, conn: sqlite3.Connection, generation: int) -> None:
        self.conn = conn
        self.generation = generation
        self.lowered = False  # set to synchronous=NORMAL for a non-durable write (``Database.write``)


def _release(conns: set[sqlite3.Connection], lock: threading.RLock, conn: sqlite3.Connection, path: str) -> None:
    """A slot went (its thread ended): close its connection unless :meth:`Database.close` already took it.

    Exactly one party closes each connection: two closes racing in two threads are not safe in ``sqlite3``.
    """
    with lock:
        if conn not in conns:
            return
        conns.discard(conn)
    _close(conn, path)


def _close(conn: sqlite3.Connection, path: str) -> None:
    try:
        conn.close()
    except sqlite3.Error:  # pragma: no cover - closing never matters more than the caller's work
        log.debug("closing %s failed", path, exc_info=True)
