"""Writes of one process queued behind another share one transaction (``brokers/sqlite/db.py``)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.db import Database
from conveyor.errors import BrokerError


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(SQLiteConfig(str(tmp_path / "group.db")))
    database.write(lambda conn: conn.execute("CREATE TABLE t (n INTEGER)"))
    yield database
    database.close()


@pytest.fixture
def observer(tmp_path: Path, db: Database) -> Iterator[sqlite3.Connection]:
    """Another connection: it sees only what was committed."""
    conn = sqlite3.connect(tmp_path / "group.db", isolation_level=None, check_same_thread=False)
    yield conn
    conn.close()


def _run_queued(db: Database, fns: list[Callable[[sqlite3.Connection], int]]) -> list[object]:
    """Call ``db.write`` with each of ``fns`` from a thread of its own, all queued before any runs."""
    outcomes: list[object] = [None] * len(fns)

    def call(number: int) -> None:
        try:
            outcomes[number] = db.write(fns[number])
        except Exception as exc:
            outcomes[number] = exc

    threads = [threading.Thread(target=call, args=(number,)) for number in range(len(fns))]
    with db.write_lock:  # as while this process waits for the file: the writes queue up
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10.0
        while len(db._queued) < len(fns):
            assert time.monotonic() < deadline, "the writes did not queue up"
            time.sleep(0.005)
    for thread in threads:
        thread.join(10)
    return outcomes


def test_writes_queued_together_commit_together(db: Database, observer: sqlite3.Connection) -> None:
    def insert(n: int) -> Callable[[sqlite3.Connection], int]:
        def fn(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t VALUES (?)", (n,))
            return int(observer.execute("SELECT count(*) FROM t").fetchone()[0])  # committed rows only

        return fn

    assert _run_queued(db, [insert(1), insert(2), insert(3)]) == [0, 0, 0]  # none saw another's commit
    assert sorted(row[0] for row in observer.execute("SELECT n FROM t")) == [1, 2, 3]


def test_a_write_that_fails_in_a_group_leaves_no_trace_and_the_others_commit(
    db: Database, observer: sqlite3.Connection
) -> None:
    def insert(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t VALUES (1)")
        return 1

    def insert_then_fail(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t VALUES (2)")
        raise ValueError("refused")

    def bad_sql(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO missing VALUES (3)")
        return 3

    outcomes = _run_queued(db, [insert, insert_then_fail, bad_sql, insert])
    assert outcomes[0] == outcomes[3] == 1
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[2], BrokerError) and "no such table" in str(outcomes[2])
    assert [row[0] for row in observer.execute("SELECT n FROM t")] == [1, 1]
