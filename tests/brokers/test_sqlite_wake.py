"""The SQLite broker's wake-up FIFOs (``<path>-wake-<queue digest>``): idle consumers woken by a commit, not a poll."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.brokers.sqlite.wake import Doorbell, wake_suffix
from conveyor.model import BrokerPolicy, NewTask
from conveyor.testing import poll_until

NOW = 1_000_000.0
_DEFAULT = wake_suffix("default")  # the default queue's FIFO

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def _fifo_reader(path: Path) -> int:
    assert stat.S_ISFIFO(os.stat(path).st_mode)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def test_a_ring_wakes_a_waiting_consumer_with_nothing_committed(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    consumer = open_sqlite()
    assert consumer.claim(["default"], NOW, 30.0) == []
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(consumer.wait_for_work(["default"], 30.0)))
    waiter.start()
    bell = Doorbell(str(db_path), _DEFAULT)

    def rung() -> bool:
        bell.ring()  # until the waiter holds the FIFO open: a ring before that reaches nobody
        waiter.join(0.01)
        return not waiter.is_alive()

    try:
        poll_until(rung, timeout=10.0, interval=0.001, message="a ring to wake the waiter")
    finally:
        bell.close()
    assert woke == [True]  # only the FIFO can have woken it: data_version never moved


def test_a_consumer_sleeps_after_a_ringing_process_has_gone(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    consumer = open_sqlite()
    assert consumer.claim(["default"], NOW, 30.0) == []
    assert consumer.wait_for_work(["default"], 0.0) is False  # listening
    bell = Doorbell(str(db_path), _DEFAULT)
    bell.ring()
    bell.close()  # the last foreign write end goes: the FIFO must not read as end-of-file forever
    assert consumer.wait_for_work(["default"], 1.0) is True
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 0.1) is False
    assert time.monotonic() - started >= 0.1


@pytest.mark.slow  # processes of their own
def test_an_enqueue_in_another_process_rings_once_a_consumer_listens(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    consumer = open_sqlite()
    assert consumer.wait_for_work(["default"], 0.0) is False  # creates the FIFO and starts listening
    reader = _fifo_reader(db_path.with_name(db_path.name + _DEFAULT))
    try:
        script = (
            "import sys\n"
            "from conveyor.brokers.sqlite import SQLiteBroker\n"
            "from conveyor.model import BrokerPolicy, NewTask\n"
            "broker = SQLiteBroker.from_url(sys.argv[1], BrokerPolicy())\n"
            f"broker.enqueue([NewTask(sys.argv[2], 'job', 'default', '[]', run_at=float(sys.argv[3]))], {NOW})\n"
            "broker.close()\n"
        )

        def enqueue(task_id: str, run_at: float) -> None:
            url = f"sqlite:///{db_path}"
            subprocess.run([sys.executable, "-c", script, url, task_id, repr(run_at)], check=True, timeout=60)

        enqueue("later", NOW + 3600)  # scheduled: nothing to wake for
        with pytest.raises(BlockingIOError):  # (not end-of-file: the consumer keeps a write end open)
            os.read(reader, 16)
        enqueue("now", NOW)
        assert os.read(reader, 16) == b"\0"
    finally:
        os.close(reader)


def test_a_file_in_the_fifos_place_is_never_written_and_polling_still_wakes(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    squatter = db_path.with_name(db_path.name + _DEFAULT)
    squatter.write_bytes(b"not ours")
    consumer, producer = open_sqlite(), open_sqlite()
    assert consumer.claim(["default"], NOW, 30.0) == []
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 0.05) is False  # no spinning on an always-readable file
    assert time.monotonic() - started >= 0.05
    producer.enqueue([NewTask("t", "job", "default", "[]")], NOW)
    assert consumer.wait_for_work(["default"], 10.0) is True  # PRAGMA data_version
    assert squatter.read_bytes() == b"not ours"


def test_a_file_in_the_turn_fifos_place_makes_a_busy_writer_sleep_not_spin(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    squatter = db_path.with_name(db_path.name + "-turn")
    squatter.write_bytes(b"not ours")
    broker = open_sqlite()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.5, holder.execute, ("COMMIT",))
        release.start()
        cpu = time.process_time()
        broker.enqueue([NewTask("waited", "job", "default", "[]")], NOW)  # waits out the holder
        assert time.process_time() - cpu < 0.1  # slept between its tries (a spin would burn the 0.5 s)
        release.join()
    finally:
        holder.close()
    assert broker.get("waited", NOW) is not None
    assert squatter.read_bytes() == b"not ours"


def test_a_writer_waiting_for_the_file_is_rung_when_the_holder_ends(db_path: Path) -> None:
    """Every write transaction rings ``<path>-turn`` as it ends: a waiter listening there wakes."""
    broker = SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    waiter = Doorbell(str(db_path), "-turn")
    try:
        assert waiter.wait(0.0) is False  # listening from now on
        broker.enqueue([NewTask("t", "job", "default", "[]")], NOW)
        deadline = time.monotonic() + 10.0
        while not waiter.wait(0.05):  # a ring before the broker saw a reader is lost: it rings again
            assert time.monotonic() < deadline, "no ring"
            broker.enqueue([NewTask(f"t{time.monotonic()}", "job", "default", "[]")], NOW)
    finally:
        waiter.close()
        broker.close()


def test_one_ring_wakes_one_waiting_consumer_not_all(db_path: Path) -> None:
    """Idle workers of several processes sleep on one FIFO: one enqueued task wakes one of them, not a
    herd racing to claim it (each waiter here has its own reader, as a process has)."""
    waiters = [Doorbell(str(db_path), _DEFAULT) for _ in range(3)]
    bell = Doorbell(str(db_path), _DEFAULT)
    woke: list[bool] = []
    try:
        for waiter in waiters:
            assert waiter.wait(0.0) is False  # listening
        threads = [threading.Thread(target=lambda w=w: woke.append(w.wait(0.5))) for w in waiters]
        for thread in threads:
            thread.start()
        bell.ring()
        for thread in threads:
            thread.join(10)
    finally:
        for doorbell in [*waiters, bell]:
            doorbell.close()
    assert sorted(woke) == [False, False, True]


def test_an_enqueue_rings_its_queues_fifo_only(open_sqlite: Callable[[], SQLiteBroker], db_path: Path) -> None:
    """A ring wakes one waiter: on one FIFO for every queue it could wake a worker of another queue,
    which claims nothing while the right one sleeps on. Each queue has its own."""
    emails, default = open_sqlite(), open_sqlite()
    assert emails.wait_for_work(["emails"], 0.0) is False  # both listening: their FIFOs exist
    assert default.wait_for_work(["default"], 0.0) is False
    readers = {q: _fifo_reader(db_path.with_name(db_path.name + wake_suffix(q))) for q in ("emails", "default")}
    try:
        producer = open_sqlite()
        producer.enqueue([NewTask("d1", "job", "default", "[]")], NOW)
        assert os.read(readers["default"], 16) == b"\0"
        with pytest.raises(BlockingIOError):
            os.read(readers["emails"], 16)
        producer.enqueue([NewTask("e1", "job", "emails", "[]"), NewTask("d2", "job", "default", "[]")], NOW)
        assert os.read(readers["emails"], 16) == b"\0"
        assert os.read(readers["default"], 16) == b"\0"  # one ring per queue and commit
    finally:
        for reader in readers.values():
            os.close(reader)


def test_a_waiter_of_several_queues_wakes_for_a_ring_of_any(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    consumer = open_sqlite()
    assert consumer.claim(["a", "b"], NOW, 30.0) == []
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(consumer.wait_for_work(["a", "b"], 30.0)))
    waiter.start()
    bell = Doorbell(str(db_path), wake_suffix("b"))

    def rung() -> bool:
        bell.ring()  # until the waiter holds the FIFO open: a ring before that reaches nobody
        waiter.join(0.01)
        return not waiter.is_alive()

    try:
        poll_until(rung, timeout=10.0, interval=0.001, message="a ring of queue b to wake the waiter")
    finally:
        bell.close()
    assert woke == [True]  # only the FIFO can have woken it: data_version never moved


def test_a_writer_that_does_not_ring_still_wakes_a_waiter(
    open_sqlite: Callable[[], SQLiteBroker], db_path: Path
) -> None:
    """A plain ``sqlite3`` connection (another tool) rings no FIFO: the waiter sees its commit by
    ``PRAGMA data_version``, on its longer check."""
    consumer = open_sqlite()
    woke: list[bool] = []
    claimed = threading.Event()

    def claim_then_wait() -> None:  # as a fetcher does: the wait compares with its own thread's last claim
        assert consumer.claim(["default"], NOW, 30.0) == []
        claimed.set()
        woke.append(consumer.wait_for_work(["default"], 30.0))

    waiter = threading.Thread(target=claim_then_wait)
    waiter.start()
    assert claimed.wait(10.0)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE other_tool (n INTEGER)")
        waiter.join(30.0)
    finally:
        conn.close()
    assert woke == [True]
