"""Turns at the write lock (``brokers/sqlite/db.py``, ``wake.py``): a writer that waits for another
process's transaction marks itself, and a writer about to begin lets it go first, for a bounded time."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.db import _OVERTAKE, Database
from conveyor.brokers.sqlite.wake import Doorbell
from conveyor.testing import poll_until

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")

_SRC = str(Path(__file__).parents[2] / "src")

#: Queues up on the file's turn FIFO, says so, and stays queued until its stdin closes.
_WAITER = """
import sys
from conveyor.brokers.sqlite.wake import Doorbell
bell = Doorbell(sys.argv[1], "-turn")
bell.queue_up()
print("queued", flush=True)
sys.stdin.read()
bell.leave_queue()
print("left", flush=True)
sys.stdin.close()
"""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "turns.db"


@pytest.fixture
def checker(db_path: Path) -> Iterator[Doorbell]:
    """This process's view of the turn FIFO (its own open files: ``flock`` tells them apart)."""
    bell = Doorbell(str(db_path), "-turn")
    yield bell
    bell.close()


@contextlib.contextmanager
def _waiter(db_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process queued up on ``db_path``'s turn FIFO; killed (by its PID) on the way out."""
    with subprocess.Popen(
        [sys.executable, "-c", _WAITER, str(db_path)],
        env={**os.environ, "PYTHONPATH": _SRC},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "queued\n"
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


def test_another_process_waiting_is_seen_until_it_leaves_or_dies(db_path: Path, checker: Doorbell) -> None:
    Database(SQLiteConfig(str(db_path))).close()
    assert not checker.others_waiting()  # nobody ever listened: no ring found a reader yet
    with _waiter(db_path) as first:
        checker.ring()  # finds the waiter's reader: from now on the checker can tell
        assert checker.others_waiting()
        assert first.stdin is not None and first.stdout is not None
        first.stdin.close()
        assert first.stdout.readline() == "left\n"
        assert not checker.others_waiting()
    with _waiter(db_path) as second:
        checker.ring()
        assert checker.others_waiting()
        second.send_signal(signal.SIGKILL)
        second.wait(30)
        assert not checker.others_waiting()  # the kernel dropped the dead waiter's lock


def test_a_writer_kept_waiting_by_another_process_queues_up_then_leaves(db_path: Path, checker: Doorbell) -> None:
    db = Database(SQLiteConfig(str(db_path)))
    db.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER)"))
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    done: list[object] = []
    writer = threading.Thread(target=lambda: done.append(db.write(lambda c: c.execute("INSERT INTO t VALUES (1)"))))
    writer.start()
    try:

        def queued() -> bool:
            checker.ring()  # (wakes the writer too: it meets the lock again and waits on)
            return checker.others_waiting()

        poll_until(queued, timeout=10.0, message="the waiting writer to queue up")
        holder.execute("COMMIT")
        writer.join(10)
        assert done and not writer.is_alive()
        assert not checker.others_waiting()
        assert holder.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        writer.join(10)
        holder.close()
        db.close()


def test_a_waiter_that_never_takes_its_turn_holds_no_writer_up_for_good(db_path: Path, checker: Doorbell) -> None:
    db = Database(SQLiteConfig(str(db_path)))

    def insert(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")

    try:
        with _waiter(db_path):
            db.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER)"))  # rings: finds the waiter's reader
            assert db._turn.others_waiting()
            for _ in range(3):  # each steps aside a bounded time, then writes
                db.write(insert)
            assert db.read(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0]) == 3
    finally:
        db.close()


def test_a_writer_goes_on_a_while_before_it_lets_a_waiter_go_first(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Letting a waiter go first at every write makes a writer that writes back to back (a producer)
    wait for each of the other's commits; it does so once it has seen the waiter for ``_OVERTAKE``."""
    db = Database(SQLiteConfig(str(db_path)))
    looks: list[int] = []  # per write, how often it asked whether others wait: more than once, it stepped aside
    asked = db._turn.others_waiting

    def counted() -> bool:
        looks[-1] += 1
        return asked()

    monkeypatch.setattr(db._turn, "others_waiting", counted)
    started: list[float] = []

    def stepped_aside() -> bool:
        looks.append(0)
        started.append(time.monotonic())
        db.write(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
        return looks[-1] > 1

    try:
        with _waiter(db_path):
            looks.append(0)
            db.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER)"))  # rings: finds the waiter's reader
            assert not stepped_aside()  # the first write that sees it waiting goes on
            first = started[-1]
            poll_until(stepped_aside, timeout=10.0, message="a write to let the waiter go first")
            assert started[-1] - first >= _OVERTAKE
            assert not stepped_aside()  # its turn given, the writer goes on again for a while
    finally:
        db.close()
