"""Real processes on one SQLite file: concurrent workers, and workers killed inside write transactions.

Workers are separate interpreters (``python -c SCRIPT``) so that each has its own connections and
locks, exactly like worker processes in production. Each keeps a ledger file, appended (and flushed)
only after the broker acknowledged the call: the ledgers are what the file must agree with.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy, NewTask, TaskState
from conveyor.testing import poll_until

pytestmark = pytest.mark.slow

NOW = 1_000.0
_SRC = str(Path(__file__).parents[2] / "src")

_WORKER = """
import sys
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy, Outcome
url, ledger_path = sys.argv[1], sys.argv[2]
broker = SQLiteBroker.from_url(url, BrokerPolicy())
with open(ledger_path, "a") as ledger:
    while batch := broker.claim(["default"], 1000.0, 3600.0, limit=25):
        done = broker.settle([Outcome(r.id, r.lease_token, "complete", result="null") for r in batch], 1000.0)
        assert all(done), done
        ledger.write("".join(r.id + "\\n" for r in batch))
        ledger.flush()
broker.close()
"""

_VICTIM = """
import itertools, sys
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy, NewTask, Outcome
url, ledger_path, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
broker = SQLiteBroker.from_url(url, BrokerPolicy())
with open(ledger_path, "a") as ledger:
    def note(kind, ids):
        ledger.write("".join(f"{kind} {i}\\n" for i in ids))
        ledger.flush()
    for n in itertools.count():
        tasks = [NewTask(f"{prefix}-{n}-{i}", "job", "default", "[]") for i in range(100)]
        broker.enqueue(tasks, 1000.0)
        note("enqueued", [t.id for t in tasks])
        for i in range(20):  # one-task enqueues of generated ids: the inbox, folded by the claim below
            one = NewTask(f"{prefix}-{n}-one-{i}", "job", "default", "[]", fresh=True)
            broker.enqueue([one], 1000.0)
            note("enqueued", [one.id])
        claimed = broker.claim(["default"], 1000.0, 10.0, limit=20)
        note("claimed", [r.id for r in claimed])
        settled = claimed[:10]
        broker.settle([Outcome(r.id, r.lease_token, "complete") for r in settled], 1000.0)
        note("completed", [r.id for r in settled])
"""


def _python(script: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": _SRC}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, stderr=subprocess.PIPE)


def _open(path: Path) -> SQLiteBroker:
    return SQLiteBroker.from_url(f"sqlite:///{path}", BrokerPolicy())


def test_four_processes_complete_every_task_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    broker = _open(db)
    ids = [f"task-{i}" for i in range(20_000)]
    for start in range(0, len(ids), 1000):
        broker.enqueue([NewTask(i, "job", "default", "[]") for i in ids[start : start + 1000]], NOW)
    ledgers = [tmp_path / f"worker{n}.ledger" for n in range(4)]
    workers = [_python(_WORKER, f"sqlite:///{db}", str(ledger)) for ledger in ledgers]
    for worker in workers:
        _, stderr = worker.communicate(timeout=120)
        assert worker.returncode == 0, stderr.decode()

    completed = Counter(line for ledger in ledgers for line in ledger.read_text().split())
    assert set(completed) == set(ids)
    assert max(completed.values()) == 1
    assert sum(1 for ledger in ledgers if ledger.read_text()) >= 2  # the work really was shared
    counts = broker.queues(NOW)[0].counts
    assert counts["completed"] == 20_000 and counts["total"] == 20_000
    assert {r.attempts for r in broker.list_tasks("default", TaskState.COMPLETED, NOW, limit=20_000)} == {1}
    broker.close()


def _drop_cut_line(ledger: Path) -> None:
    """Cut the ledger back to its last whole line. A kill can stop a note's write part way: Linux
    checks for a fatal signal between the pages a write() copies, so a note that crosses a page of the
    file can end mid-id ("r3-12-1" of "r3-12-15", another task's id) and the next victim's first note
    would continue that line. A note counts once its line is whole."""
    data = ledger.read_bytes()
    if data and not data.endswith(b"\n"):
        with ledger.open("r+b") as file:
            file.truncate(data.rfind(b"\n") + 1)


def _progressed(victim: subprocess.Popen[bytes], ledger: Path, offset: int) -> bool:
    """Whether the victim completed a task since its ledger held ``offset`` bytes (fails if it died)."""
    assert victim.poll() is None, victim.communicate()[1].decode()
    return "completed " in ledger.read_bytes()[offset:].decode(errors="replace")


def test_processes_killed_inside_write_transactions_lose_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    _open(db).close()  # schema in place: the kills below hit task transactions
    ledger = tmp_path / "victim.ledger"
    ledger.touch()
    rng = random.Random(3)
    for round_ in range(8):
        offset = ledger.stat().st_size
        victim = _python(_VICTIM, f"sqlite:///{db}", str(ledger), f"r{round_}")
        poll_until(partial(_progressed, victim, ledger, offset), timeout=30, message="the victim to make progress")
        time.sleep(rng.uniform(0.0, 0.05))  # land somewhere in its stream of write transactions
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        _drop_cut_line(ledger)

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()

    notes: dict[str, set[str]] = {"enqueued": set(), "claimed": set(), "completed": set()}
    for line in ledger.read_text().splitlines():
        kind, _, task_id = line.partition(" ")
        notes[kind].add(task_id)
    broker = _open(db)
    later = NOW + 60.0  # every lease (10 s) has expired
    records = {task_id: broker.get(task_id, NOW) for task_id in notes["enqueued"]}
    assert all(record is not None for record in records.values()), "an acknowledged enqueue was lost"
    active_before = broker.queues(NOW)[0].counts["active"]
    unacked = notes["claimed"] - notes["completed"]
    # A kill can land after a settle committed and before its note: at most one batch of 10 per round.
    states = {t: r.state if (r := broker.get(t, NOW)) is not None else None for t in unacked}
    settled_unnoted = {t for t, state in states.items() if state is TaskState.COMPLETED}
    assert len(settled_unnoted) <= 10 * 8
    not_active = {t: states[t] for t in unacked - settled_unnoted if states[t] is not TaskState.ACTIVE}
    assert not not_active, not_active
    assert active_before >= len(unacked - settled_unnoted) > 0

    assert broker.reap(later, limit=100_000) == active_before
    counts = broker.queues(later)[0].counts
    assert counts["active"] == 0
    for task_id in notes["claimed"] - notes["completed"]:
        record = broker.get(task_id, later)
        assert record is not None
        assert record.state in (TaskState.PENDING, TaskState.COMPLETED)  # completed: killed before its note
        if record.state is TaskState.PENDING:
            assert record.stalls == 1 and record.attempts == 1
    for task_id in notes["completed"]:
        record = broker.get(task_id, later)
        assert record is not None and record.state is TaskState.COMPLETED
    reclaimed = broker.claim(["default"], later, 30.0, limit=100_000)
    # settled_unnoted, not the states of the noted enqueues: a kill can cut an "enqueued" note too, and
    # a later victim then claims and settles those tasks before its own kill cuts the "completed" note
    assert {r.id for r in reclaimed} >= unacked - settled_unnoted
    broker.close()
