"""Which commits sync (``brokers/sqlite/db.py``): a claim alone does not, what enqueues or settles does.

Under ``synchronous=FULL`` (the default) a write made with ``durable=False`` commits at ``NORMAL``;
every other write commits at the file's setting. Checked three ways: the setting each write runs
under, the statements the broker's connection runs, and the disk syncs a real process makes
(``strace``, where it can trace).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.brokers.sqlite.db import Database
from conveyor.model import BrokerPolicy, NewTask, Outcome
from conveyor.testing import poll_until

NOW = 1_000_000.0
_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _level(conn: sqlite3.Connection) -> str:
    """The ``synchronous`` setting a write runs under (read inside its transaction)."""
    return _LEVELS[int(conn.execute("PRAGMA synchronous").fetchone()[0])]


@pytest.fixture
def open_db(tmp_path: Path) -> Iterator[Callable[[str], Database]]:
    opened: list[Database] = []

    def factory(synchronous: str) -> Database:
        db = Database(SQLiteConfig(str(tmp_path / f"{synchronous}.db"), synchronous=synchronous))
        opened.append(db)
        return db

    yield factory
    for db in opened:
        db.close()


@pytest.mark.parametrize(
    ("setting", "lowered"), [("FULL", "NORMAL"), ("EXTRA", "NORMAL"), ("NORMAL", "NORMAL"), ("OFF", "OFF")]
)
def test_a_write_that_is_not_durable_commits_at_normal_at_most(
    open_db: Callable[[str], Database], setting: str, lowered: str
) -> None:
    db = open_db(setting)
    seen = [
        db.write(_level),
        db.write(_level, durable=False),
        db.write(_level, durable=False),
        db.write(_level),
        db.read(_level),
        db.write(_level, durable=False),
    ]
    assert seen == [setting, lowered, lowered, setting, setting, lowered]  # a read switches nothing


def test_each_thread_switches_its_own_connection(open_db: Callable[[str], Database]) -> None:
    db = open_db("FULL")
    assert db.write(_level, durable=False) == "NORMAL"
    other: list[str] = []
    thread = threading.Thread(target=lambda: other.append(db.write(_level)))
    thread.start()
    thread.join(10)
    assert other == ["FULL"]
    assert db.write(_level) == "FULL"


def test_a_group_commit_with_one_durable_write_is_durable(open_db: Callable[[str], Database]) -> None:
    db = open_db("FULL")
    outcomes: dict[str, str] = {}

    def call(name: str, durable: bool) -> None:
        outcomes[name] = db.write(_level, durable=durable)

    threads = [
        threading.Thread(target=call, args=("claim", False)),
        threading.Thread(target=call, args=("settle", True)),
        threading.Thread(target=call, args=("claim again", False)),
    ]
    with db.write_lock:  # as while this process waits for the file: the three queue up, then share a commit
        for thread in threads:
            thread.start()
        poll_until(lambda: len(db._queued) == len(threads), timeout=10.0, message="the writes did not queue up")
    for thread in threads:
        thread.join(10)
    assert outcomes == {"claim": "FULL", "settle": "FULL", "claim again": "FULL"}
    only_claims: dict[str, str] = {}
    threads = [
        threading.Thread(target=lambda n=n: only_claims.update({n: db.write(_level, durable=False)})) for n in "ab"
    ]
    with db.write_lock:
        for thread in threads:
            thread.start()
        poll_until(lambda: len(db._queued) == len(threads), timeout=10.0, message="the writes did not queue up")
    for thread in threads:
        thread.join(10)
    assert only_claims == {"a": "NORMAL", "b": "NORMAL"}


def _task(task_id: str) -> NewTask:
    return NewTask(id=task_id, name="noop", queue="default", payload="{}")


def test_the_broker_syncs_enqueues_and_settles_and_not_a_claim_alone(tmp_path: Path) -> None:
    broker = SQLiteBroker(SQLiteConfig(str(tmp_path / "b.db")), BrokerPolicy())
    try:
        statements: list[str] = []
        broker._db.connection().set_trace_callback(statements.append)  # this thread's connection

        def levels(call: Callable[[], object]) -> list[str]:
            """The ``synchronous`` switches a call made before its ``BEGIN``."""
            statements.clear()
            call()
            assert "COMMIT" in statements
            return [s.split("=")[1].strip() for s in statements if s.startswith("PRAGMA synchronous")]

        assert levels(lambda: broker.enqueue([_task("a"), _task("b"), _task("c")], NOW)) == []  # FULL as opened
        claimed: list[str] = []
        assert levels(lambda: claimed.extend(r.lease_token or "" for r in broker.claim(["default"], NOW, 30, 1))) == [
            "NORMAL"
        ]
        assert levels(lambda: broker.claim(["default"], NOW, 30, 1)) == []  # still lowered
        outcome = Outcome(task_id="a", token=claimed[0], kind="complete")
        assert levels(lambda: broker.settle([outcome], NOW)) == ["FULL"]
        settled: list[bool] = []
        records = broker.claim(["default"], NOW, 30, 1)
        outcome = Outcome(task_id=records[0].id, token=records[0].lease_token or "", kind="complete")
        assert levels(lambda: settled.extend(broker.settle_and_claim([outcome], ["default"], NOW, 30, 1)[0])) == [
            "FULL"
        ]
        assert settled == [True]
    finally:
        broker.close()


_SCRIPT = """
import os, sys
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.brokers.sqlite.config import SQLiteConfig
from conveyor.model import BrokerPolicy, NewTask, Outcome

def mark(text):
    os.write(2, f"MARK {text}\\n".encode())

broker = SQLiteBroker(SQLiteConfig(sys.argv[1]), BrokerPolicy())
broker.enqueue([NewTask(id="warm", name="noop", queue="default", payload="{}")], 1e6)
mark("enqueue")
broker.enqueue([NewTask(id=f"t{n}", name="noop", queue="default", payload="{}") for n in range(3)], 1e6)
for n in range(3):
    mark("claim")
    record = broker.claim(["default"], 1e6, 30.0, 1)[0]
    mark("settle")
    broker.settle([Outcome(task_id=record.id, token=record.lease_token, kind="complete")], 1e6)
mark("end")
broker.close()
"""


def test_a_real_process_syncs_the_disk_for_enqueues_and_settles_only(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    script = tmp_path / "syncs.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    done = subprocess.run(
        [
            strace,
            "-f",
            "-e",
            "trace=fsync,fdatasync",
            "-e",
            "signal=none",
            sys.executable,
            str(script),
            str(tmp_path / "s.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and "MARK end" not in done.stderr:
        pytest.skip(f"cannot trace a process here: {done.stderr.strip().splitlines()[-1:]}")
    syncs: dict[str, int] = {}
    section = ""
    for line in done.stderr.splitlines():
        if line.startswith("MARK "):
            section = line[5:]
        elif section and ("fdatasync(" in line or "fsync(" in line):
            syncs[section] = syncs.get(section, 0) + 1
    assert syncs.get("claim", 0) == 0, done.stderr
    assert syncs.get("enqueue", 0) >= 1
    assert syncs.get("settle", 0) >= 3
