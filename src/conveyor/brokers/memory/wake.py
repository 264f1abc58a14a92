"""How an idle consumer of the memory broker waits for work (``WaitsForWork``).

Every transition that may make a task of a queue claimable *rings* that queue: a task made pending
(enqueued, promoted, reaped, run now, released), a task leaving its slot in a queue with a
``concurrency`` limit, a queue resumed or its limit changed. A waiter sleeps on one
``threading.Condition`` of the store's lock and returns once one of *its* queues rang since its
thread's last claim (a ring of another queue wakes the thread, which looks and sleeps on).

A scheduled or retry task falls due with no call at all: the wait also ends when the first such task
of its queues does, so the next claim promotes and takes it then. The broker has no clock of its own,
only the ``now`` its callers pass: a due time becomes a real deadline through this thread's last
claim (its ``now`` and the monotonic time it ran), when that ``now`` was the wall clock (within
:data:`conveyor.clock.PRESENT_SLACK` of ``time.time()``: ``is_present``). A FakeClock's time does
not pass with real time: on one, only a due time the claim's ``now`` had reached (a retry without
backoff settled after the claim) ends the wait, at once; a later one ends none (the wait ends on a
ring or at its timeout, and a test moves the clock and claims).

A stopping worker interrupts the waits (``InterruptsWaits``): a ring of every queue, so its fetcher
returns at once instead of at its timeout, up to ``poll_interval`` later; as on every broker
(``conveyor.brokers.interrupts``), a thread that never claimed counts interrupts from the start.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

from conveyor.clock import is_present

__all__ = ["Wakes"]


class Wakes:
    """The rings of one memory broker and the waits on them; every method but :meth:`wait` runs with the
    broker's lock held."""

    def __init__(self, lock: threading.RLock) -> None:
        self._condition = threading.Condition(lock)
        self._rings = 0  # rings so far, of every queue
        self._rung: dict[str, int] = {}  # queue -> the count of rings when it last rang
        self._interrupted = 0  # the count of rings at the last interrupt, which rings every queue
        self._waiting = 0
        self._mine = threading.local()  # the last claim's: seen (rings), at (monotonic), now, wall (clock)

    def ring(self, queue: str) -> None:
        """A task of ``queue`` may have become claimable."""
        self._rings += 1
        self._rung[queue] = self._rings
        self.stir()

    def interrupt(self) -> None:
        """End the waits in progress, and the next of each thread whose last claim came before."""
        self._rings += 1
        self._interrupted = self._rings
        self.stir()

    def stir(self) -> None:
        """A due time may have changed: the waiters look again."""
        if self._waiting:
            self._condition.notify_all()

    def claimed(self, now: float) -> None:
        """This thread has just claimed at ``now``: a wait after it ends on rings that come later, and at
        due times counted from it."""
        mine = self._mine
        mine.seen = self._rings
        mine.at = time.monotonic()
        mine.now = now
        mine.wall = is_present(now)

    def wait(self, queues: Sequence[str], timeout: float, next_due: Callable[[Sequence[str]], float | None]) -> bool:
        """Block up to ``timeout`` s until one of ``queues`` rang since this thread's last claim (True), or
        the first due time of their tasks, ``next_due(queues)`` (called with the lock held), passed (True,
        once per claim: a caller that waits again before claiming sleeps); False when the timeout passed."""
        mine = self._mine
        with self._condition:
            # A thread that never claimed counts rings from now, but interrupts from the start: a
            # worker's second claimer may reach its first wait after the stop's interrupt.
            seen: int = getattr(mine, "seen", self._rings)
            interrupts_seen: int = getattr(mine, "seen", 0)
            claimed_now: float | None = getattr(mine, "now", None)
            deadline = time.monotonic() + timeout
            try:
                while True:
                    if self._interrupted > interrupts_seen or any(self._rung.get(queue, 0) > seen for queue in queues):
                        return True
                    due = next_due(queues) if claimed_now is not None else None
                    due_at = math.inf if due is None or claimed_now is None else self._deadline(due, claimed_now)
                    left = min(deadline, due_at) - time.monotonic()
                    if left <= 0:
                        if due_at > deadline:
                            return False
                        mine.now = None  # this due time ends one wait; the next claim reads the next
                        return True
                    self._waiting += 1
                    try:
                        self._condition.wait(left)
                    finally:
                        self._waiting -= 1
            finally:
                mine.seen = self._rings

    def _deadline(self, due: float, claimed_now: float) -> float:
        """The monotonic time at which a task due at ``due`` (by the clock of this thread's last claim, at
        ``claimed_now``) ends the wait: on the wall clock, ``due - claimed_now`` s after that claim; on
        another, at once if the claim's clock had reached it, else never."""
        mine = self._mine
        if mine.wall:
            return float(mine.at + due - claimed_now)
        return float(mine.at) if due <= claimed_now else math.inf
