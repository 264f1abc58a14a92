"""``InterruptsWaits``, the part every broker shares: a stopping worker's fetcher checks its stop flag
after each claim, so an interrupt that comes between a claim and the wait after it must end that wait
(the wait would otherwise block a whole ``poll_interval``), one interrupt ends one wait of a thread,
and a thread that never claimed counts from the broker's start. How each broker ends a wait in
progress is tested beside it (``tests/brokers/test_*_interrupts.py``, ``test_memory_wake.py``)."""

from __future__ import annotations

import threading
import time

from conveyor import Conveyor
from conveyor.brokers.capabilities import InterruptsWaits, WaitsForWork
from conveyor.testing import poll_until

#: A wait long enough that one ending True within :data:`PROMPT` was ended by the interrupt (the
#: queue stays empty, so nothing else wakes it).
WAIT = 30.0
PROMPT = 5.0


def test_an_interrupt_between_a_claim_and_the_wait_ends_that_wait_at_once(app: Conveyor) -> None:
    broker = app.broker
    assert isinstance(broker, WaitsForWork) and isinstance(broker, InterruptsWaits)
    assert broker.claim(["default"], app.clock(), 30.0, 10) == []
    broker.interrupt_waits()  # no wait in progress yet
    started = time.monotonic()
    assert broker.wait_for_work(["default"], WAIT) is True
    assert time.monotonic() - started < PROMPT
    assert broker.wait_for_work(["default"], 0.2) is False  # one interrupt ends one wait of the thread


def test_the_first_wait_of_a_thread_that_never_claimed_ends_after_an_earlier_interrupt(app: Conveyor) -> None:
    """A worker's second claimer may go to its first wait without a claim of its own (the first found
    the queues empty), after a stop's interrupt ended the first claimer's wait."""
    broker = app.broker
    assert isinstance(broker, WaitsForWork) and isinstance(broker, InterruptsWaits)
    broker.interrupt_waits()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(broker.wait_for_work(["default"], WAIT)), daemon=True)
    thread.start()
    poll_until(lambda: not thread.is_alive(), timeout=PROMPT, message="the first wait to end")
    assert result == [True]
