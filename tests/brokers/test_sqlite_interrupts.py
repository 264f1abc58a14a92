"""``InterruptsWaits`` on SQLite: an interrupt ends an idle consumer's wait at once (a byte to the pipe
its ``select`` watches beside the wake-up FIFOs, ``halts.py``), in this broker only, and the waits after
it sleep and wake as before.

Each wait here may block :data:`WAIT` seconds; one that ends within :data:`PROMPT` of the interrupt was
ended by it (with nothing committed meanwhile, a wait ends no sooner than that).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.brokers.sqlite.wake import wake_suffix
from conveyor.model import NewTask
from conveyor.testing import poll_until

WAIT = 30.0
PROMPT = 5.0
QUEUES = ["default"]

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


class Waiter:
    """A claim, then ``wait_for_work(QUEUES, WAIT)``, on a thread of its own (as a fetcher's), started
    once it claimed: an interrupt from then on ends its wait, whether it began yet or not."""

    def __init__(self, broker: SQLiteBroker) -> None:
        self.result: list[bool] = []
        self._claimed = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(broker,))
        self.thread.start()
        assert self._claimed.wait(PROMPT)

    def _run(self, broker: SQLiteBroker) -> None:
        assert broker.claim(QUEUES, time.time(), 30.0, 10) == []
        self._claimed.set()
        self.result.append(broker.wait_for_work(QUEUES, WAIT))

    def ended(self, message: str) -> bool:
        poll_until(lambda: not self.thread.is_alive(), timeout=PROMPT, message=message)
        return self.result[0]


def test_an_interrupt_ends_the_wait_in_progress_at_once(consumer: SQLiteBroker, db_path: Path) -> None:
    waiter = Waiter(consumer)
    fifo = Path(f"{db_path}{wake_suffix('default')}")  # made by the wait (a claim only rings it)
    poll_until(fifo.exists, timeout=PROMPT, message="the wait to listen")
    consumer.interrupt_waits()
    assert waiter.ended("the interrupted wait to end") is True


def test_an_interrupt_ends_only_the_waits_of_its_broker(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    """Another broker on the file (another process's worker) waits on: interrupts stay in a process."""
    other = Waiter(producer)
    waiter = Waiter(consumer)
    consumer.interrupt_waits()
    assert waiter.ended("the interrupted wait to end") is True
    other.thread.join(0.3)
    assert other.thread.is_alive()
    producer.interrupt_waits()
    assert other.ended("the other wait to end") is True


def test_the_waits_after_an_interrupt_sleep_and_wake_as_before(
    consumer: SQLiteBroker, producer: SQLiteBroker, db_path: Path
) -> None:
    """The pipe is emptied before its next wait: a byte left by an interrupt wakes no later wait."""
    for _ in range(3):
        waiter = Waiter(consumer)
        consumer.interrupt_waits()
        assert waiter.ended("the interrupted wait to end") is True
        waiter = Waiter(consumer)
        producer.enqueue([NewTask(id=f"t{time.monotonic_ns()}", name="job", queue="default", payload="[]")], 1.0)
        assert waiter.ended("the wait to wake on a task") is True
        assert len(consumer.claim(QUEUES, time.time(), 30.0, 10)) == 1
    started = time.monotonic()
    assert not consumer.wait_for_work(QUEUES, 0.3)
    assert time.monotonic() - started >= 0.25


def test_waits_reuse_their_pipes(consumer: SQLiteBroker, db_path: Path) -> None:
    """One pipe per wait in progress, kept for the next waits: interrupted waits open no descriptors."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd to count descriptors")
    first = Waiter(consumer)
    consumer.interrupt_waits()
    assert first.ended("the first wait to end") is True
    before = pipes()
    for _ in range(10):
        waiter = Waiter(consumer)
        consumer.interrupt_waits()
        assert waiter.ended("the interrupted wait to end") is True
    assert pipes() == before


def pipes() -> int:
    """This process's pipes open (the FIFOs beside the file are not: they read as the file's path)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            continue  # (the listing's own descriptor, closed since)
    return found
