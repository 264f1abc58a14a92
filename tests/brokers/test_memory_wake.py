"""An idle consumer of the memory broker waits for work (``MemoryBroker.wait_for_work``, ``wake.py``).

It wakes when a task of its queues may have become claimable since its thread's last claim, and, for
a claim timed by the wall clock, when the first scheduled or retry task of its queues falls due; on a
FakeClock, only a due time its claim's clock had reached ends the wait (at once). Each test's bound
on a wait is its timeout (a wait that returns True did not time out); lower bounds check that a wait
lasted, never how fast a wake came.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from conveyor.brokers.memory import MemoryBroker
from conveyor.model import NewTask, Outcome, QueueSettings

#: A time no wall clock shows: a claim at it was timed by a fake clock.
FAKE_NOW = 1_000_000.0
DUE = 0.3


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


@pytest.fixture
def elsewhere() -> Iterator[Callable[[Callable[[], object]], None]]:
    """``elsewhere(call)`` runs ``call`` on a thread of its own (joined at teardown)."""
    threads: list[threading.Thread] = []

    def run(call: Callable[[], object]) -> None:
        thread = threading.Thread(target=call, daemon=True)
        threads.append(thread)
        thread.start()

    yield run
    for thread in threads:
        thread.join(timeout=10.0)


def task(task_id: str, queue: str = "default", run_at: float | None = None) -> NewTask:
    return NewTask(task_id, "job", queue, "[]", run_at=run_at)


def lasted(broker: MemoryBroker, queues: list[str], timeout: float) -> bool:
    """Whether a wait on ``queues`` returned False and only after its ``timeout``."""
    started = time.monotonic()
    return broker.wait_for_work(queues, timeout) is False and time.monotonic() - started >= timeout


def test_a_wait_ends_at_its_timeout_when_nothing_happens(broker: MemoryBroker) -> None:
    assert broker.claim(["default"], time.time(), 30.0, 10) == []
    assert lasted(broker, ["default"], 0.2)


def test_an_enqueue_by_another_thread_ends_the_wait(broker: MemoryBroker, elsewhere: Callable[..., None]) -> None:
    assert broker.claim(["default"], time.time(), 30.0, 10) == []
    elsewhere(lambda: broker.enqueue([task("new")], time.time()))
    assert broker.wait_for_work(["default"], 10.0) is True
    assert [record.id for record in broker.claim(["default"], time.time(), 30.0, 10)] == ["new"]


def test_an_enqueue_between_the_claim_and_the_wait_is_not_lost(broker: MemoryBroker) -> None:
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    broker.enqueue([task("new")], FAKE_NOW)
    assert broker.wait_for_work(["default"], 10.0) is True


def test_a_ring_of_another_queue_does_not_end_the_wait(broker: MemoryBroker, elsewhere: Callable[..., None]) -> None:
    assert broker.claim(["a"], time.time(), 30.0, 10) == []
    broker.enqueue([task("for-b", "b")], time.time())
    elsewhere(lambda: broker.enqueue([task("for-b-too", "b")], time.time()))  # wakes the waiter's thread
    assert lasted(broker, ["a"], 0.3)


def test_a_ring_ends_one_wait_only(broker: MemoryBroker) -> None:
    """A caller that waits again before it claims is not woken at once forever by the same ring."""
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    broker.enqueue([task("new")], FAKE_NOW)
    assert broker.wait_for_work(["default"], 10.0) is True
    assert lasted(broker, ["default"], 0.2)


def test_a_slot_freed_under_a_concurrency_limit_ends_the_wait(
    broker: MemoryBroker, elsewhere: Callable[..., None]
) -> None:
    broker.configure_queue(QueueSettings("default", concurrency=1))
    broker.enqueue([task("first"), task("second")], FAKE_NOW)
    [first] = broker.claim(["default"], FAKE_NOW, 30.0, 10)  # the limit holds the second back
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    elsewhere(lambda: broker.settle([Outcome("first", first.lease_token or "", "complete")], FAKE_NOW))
    assert broker.wait_for_work(["default"], 10.0) is True
    assert [record.id for record in broker.claim(["default"], FAKE_NOW, 30.0, 10)] == ["second"]


def test_a_raised_concurrency_limit_ends_the_wait(broker: MemoryBroker, elsewhere: Callable[..., None]) -> None:
    broker.configure_queue(QueueSettings("default", concurrency=1))
    broker.enqueue([task("first"), task("second")], FAKE_NOW)
    assert len(broker.claim(["default"], FAKE_NOW, 30.0, 10)) == 1
    elsewhere(lambda: broker.configure_queue(QueueSettings("default", concurrency=2)))
    assert broker.wait_for_work(["default"], 10.0) is True


def test_a_resumed_queue_ends_the_wait(broker: MemoryBroker, elsewhere: Callable[..., None]) -> None:
    broker.set_paused("default", True)
    broker.enqueue([task("held")], FAKE_NOW)
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    elsewhere(lambda: broker.set_paused("default", False))
    assert broker.wait_for_work(["default"], 10.0) is True


def test_an_interrupt_ends_the_wait_in_progress(broker: MemoryBroker, elsewhere: Callable[..., None]) -> None:
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    elsewhere(broker.interrupt_waits)
    assert broker.wait_for_work(["default"], 10.0) is True


def test_an_interrupt_after_a_claim_ends_the_next_wait(broker: MemoryBroker) -> None:
    """A fetcher stopped between its claim and its wait does not wait out its timeout."""
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    broker.interrupt_waits()
    assert broker.wait_for_work(["default"], 10.0) is True
    assert lasted(broker, ["default"], 0.2)  # once


def _waited_until_due(broker: MemoryBroker, queue: str, now: float) -> float:
    """Claim nothing from ``queue`` at ``now`` (the wall clock), then wait (10 s at most); how long."""
    assert broker.claim([queue], now, 30.0, 10) == []
    started = time.monotonic()
    assert broker.wait_for_work([queue], 10.0) is True  # not the timeout
    return time.monotonic() - started


def test_a_wait_ends_when_a_scheduled_task_falls_due(broker: MemoryBroker) -> None:
    now = time.time()
    broker.enqueue([task("later", run_at=now + DUE)], now)
    assert _waited_until_due(broker, "default", now) >= DUE - 0.05  # (counted from the claim)
    assert [record.id for record in broker.claim(["default"], time.time(), 30.0, 10)] == ["later"]


def test_a_wait_ends_when_a_retry_settled_meanwhile_falls_due(
    broker: MemoryBroker, elsewhere: Callable[..., None]
) -> None:
    now = time.time()
    broker.enqueue([task("flaky")], now)
    [record] = broker.claim(["default"], now, 30.0, 10)
    retry = Outcome("flaky", record.lease_token or "", "retry", error="boom", run_at=now + DUE)
    elsewhere(lambda: broker.settle([retry], now))  # while (or before) the consumer waits
    assert _waited_until_due(broker, "default", now) >= DUE - 0.05
    assert [record.id for record in broker.claim(["default"], time.time(), 30.0, 10)] == ["flaky"]


def test_a_task_of_another_queue_falling_due_does_not_end_the_wait(broker: MemoryBroker) -> None:
    now = time.time()
    broker.enqueue([task("elsewhere", "other", run_at=now + 0.05)], now)
    assert broker.claim(["default"], now, 30.0, 10) == []
    assert lasted(broker, ["default"], 0.3)


def test_a_due_time_ends_one_wait_only(broker: MemoryBroker) -> None:
    now = time.time()
    broker.enqueue([task("later", run_at=now + 0.05)], now)
    assert broker.claim(["default"], now, 30.0, 10) == []
    assert broker.wait_for_work(["default"], 10.0) is True
    assert lasted(broker, ["default"], 0.2)


def test_a_retry_due_by_a_fake_clocks_claim_ends_the_wait_at_once(broker: MemoryBroker) -> None:
    """A retry without backoff, settled after the consumer's claim, is due by that claim's clock."""
    broker.enqueue([task("flaky")], FAKE_NOW)
    [record] = broker.claim(["default"], FAKE_NOW, 30.0, 10)
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    assert broker.settle([Outcome("flaky", record.lease_token or "", "retry", error="boom")], FAKE_NOW) == [True]
    assert broker.wait_for_work(["default"], 10.0) is True
    assert [record.id for record in broker.claim(["default"], FAKE_NOW, 30.0, 10)] == ["flaky"]


def test_a_due_time_on_a_fake_clock_ends_no_wait(broker: MemoryBroker) -> None:
    """A FakeClock's time does not pass with real time: the task falls due when the test moves it."""
    broker.enqueue([task("later", run_at=FAKE_NOW + 0.05)], FAKE_NOW)
    assert broker.claim(["default"], FAKE_NOW, 30.0, 10) == []
    assert lasted(broker, ["default"], 0.3)
    assert [record.id for record in broker.claim(["default"], FAKE_NOW + 0.05, 30.0, 10)] == ["later"]
