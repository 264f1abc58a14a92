"""An idle SQLite consumer among busy processes: woken by rings of its queues, not by every commit.

Other processes settling their own work commit all the time; if each of their commits woke an idle
worker, its every wake-up would be a claim finding nothing, a write transaction competing for the lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import NewTask, Outcome, QueueSettings

NOW = 1_000_000.0

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform"),
    pytest.mark.slow,  # processes of their own
]

#: A second Conveyor process: enqueues to ``sys.argv[2]``; given ``sys.argv[3]`` seconds, keeps doing
#: so for that long, each time claiming and settling what it enqueued, as a busy worker does.
_OTHER = """
import os, sys, time
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy, NewTask, Outcome
broker = SQLiteBroker.from_url(sys.argv[1], BrokerPolicy())
queue, seconds = sys.argv[2], float(sys.argv[3])
now, n, until = 1_000_000.0, 0, time.monotonic() + seconds
while n == 0 or time.monotonic() < until:
    n += 1
    broker.enqueue([NewTask(f"{queue}-{os.getpid()}-{n}-{i}", "job", queue, "[]") for i in range(5)], now)
    if seconds:
        claimed = broker.claim([queue], now, 30.0, 5)
        broker.settle([Outcome(record.id, record.lease_token or "", "complete") for record in claimed], now)
broker.close()
"""


def _other(db_path: Path, queue: str, seconds: float = 0.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _OTHER, f"sqlite:///{db_path}", queue, repr(seconds)])


def _run_other(db_path: Path, queue: str) -> None:
    assert _other(db_path, queue).wait(60) == 0


def _idle(consumer: SQLiteBroker, queue: str, db_path: Path) -> list[str]:
    """Let ``consumer`` claim from ``queue`` until nothing is left to it, listening since well before
    that claim, and take the rings pending so far; the ids it claimed."""
    assert consumer.wait_for_work([queue], 0.0) in (True, False)  # listening from now on
    _run_other(db_path, "other")  # (a process's start also outlasts a producer's pause after finding no reader)
    held = [record.id for record in consumer.claim([queue], NOW, 30.0, 10)]
    assert consumer.claim([queue], NOW, 30.0, 10) == []
    while consumer.wait_for_work([queue], 0.0):  # the rings of the enqueues so far
        pass
    return held


def test_a_task_leaving_its_slot_in_a_capped_queue_wakes_an_idle_consumer(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    producer.configure_queue(QueueSettings("capped", concurrency=1))
    producer.enqueue([NewTask("c1", "job", "capped", "[]"), NewTask("c2", "job", "capped", "[]")], NOW)
    assert _idle(consumer, "capped", db_path) == ["c1"]
    token = consumer.get("c1", NOW)
    assert token is not None and token.lease_token is not None
    assert producer.settle([Outcome("c1", token.lease_token, "complete")], NOW) == [True]
    started = time.monotonic()
    assert consumer.wait_for_work(["capped"], 0.3) is True
    assert time.monotonic() - started < 0.3
    assert [record.id for record in consumer.claim(["capped"], NOW, 30.0, 10)] == ["c2"]


def test_resuming_a_paused_queue_wakes_an_idle_consumer(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    producer.set_paused("held", True)
    producer.enqueue([NewTask("h1", "job", "held", "[]")], NOW)
    assert _idle(consumer, "held", db_path) == []
    producer.set_paused("held", False)
    started = time.monotonic()
    assert consumer.wait_for_work(["held"], 0.3) is True
    assert time.monotonic() - started < 0.3
    assert [record.id for record in consumer.claim(["held"], NOW, 30.0, 10)] == ["h1"]


def test_a_task_scheduled_to_fall_due_soon_wakes_an_idle_consumer(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    """Its claim before the wait knew of no such task: woken, it claims and learns when it falls due."""
    assert _idle(consumer, "soon", db_path) == []
    producer.enqueue([NewTask("s1", "job", "soon", "[]", run_at=NOW + 5.0)], NOW)
    started = time.monotonic()
    assert consumer.wait_for_work(["soon"], 0.3) is True
    assert time.monotonic() - started < 0.3


def test_a_retry_settled_by_another_connection_wakes_an_idle_consumer(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    """As a worker's acker settles a failed task with no backoff while its fetcher waits."""
    producer.enqueue([NewTask("r1", "job", "again", "[]")], NOW)
    assert _idle(consumer, "again", db_path) == ["r1"]
    held = consumer.get("r1", NOW)
    assert held is not None and held.lease_token is not None
    assert producer.settle([Outcome("r1", held.lease_token, "retry", error="boom", run_at=NOW)], NOW) == [True]
    started = time.monotonic()
    assert consumer.wait_for_work(["again"], 0.3) is True
    assert time.monotonic() - started < 0.3
    assert [record.id for record in consumer.claim(["again"], NOW, 30.0, 10)] == ["r1"]


def test_a_commit_of_another_process_to_another_queue_does_not_wake_an_idle_consumer(
    consumer: SQLiteBroker, db_path: Path
) -> None:
    assert consumer.wait_for_work(["default"], 0.0) is False  # listening from now on
    _run_other(db_path, "other")  # (a process's start also outlasts a producer's pause after finding no reader)
    assert consumer.claim(["default"], NOW, 30.0) == []
    _run_other(db_path, "other")  # data_version moves; nothing rings "default"
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 0.3) is False
    assert time.monotonic() - started >= 0.3
    _run_other(db_path, "default")  # an enqueue of any Conveyor process rings: seen at once
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 30.0) is True
    assert time.monotonic() - started < 0.3  # not by data_version, checked only every 0.5 s
    assert len(consumer.claim(["default"], NOW, 30.0, 10)) == 5


def test_a_consumer_that_was_not_listening_at_its_claim_still_sees_a_commit_at_once(
    consumer: SQLiteBroker, db_path: Path
) -> None:
    """Before its first wait a consumer held no FIFO open: a ring then found no reader, so the first
    wait still compares ``data_version`` at once."""
    assert consumer.claim(["default"], NOW, 30.0) == []
    _run_other(db_path, "default")
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 30.0) is True
    assert time.monotonic() - started < 0.3


def test_an_idle_consumer_claims_rarely_while_another_process_drains(consumer: SQLiteBroker, db_path: Path) -> None:
    assert consumer.wait_for_work(["idle"], 0.0) is False  # listening from now on
    _run_other(db_path, "busy")
    claims = 0
    done = threading.Event()

    def idle_worker() -> None:  # the fetcher's loop: claim, and when nothing came, wait
        nonlocal claims
        while not done.is_set():
            claims += 1
            assert consumer.claim(["idle"], NOW, 30.0, 10) == []
            consumer.wait_for_work(["idle"], 0.25)

    thread = threading.Thread(target=idle_worker)
    started = time.monotonic()
    thread.start()
    try:
        assert _other(db_path, "busy", seconds=2.0).wait(120) == 0
    finally:
        done.set()
        thread.join(30)
    elapsed = time.monotonic() - started
    assert claims <= elapsed / 0.25 + 3, f"{claims} empty claims in {elapsed:.2f} s"
