"""An idle consumer's wait for work on SQLite (``SQLiteBroker.wait_for_work``, ``interrupt_waits``).

It sleeps on the wake-up FIFOs of its queues (``wake.py``), which a broker rings after a commit that
made a task of that queue pending, or scheduled or retried it within a minute (``tx``), so an idle
worker wakes within a scheduler hop of an enqueue. A commit that rang none of them (another process
settling its own work) does not wake it: while other processes drain, an idle worker's every wake-up
would be a claim that finds nothing, a write transaction competing for the lock. A task falls due
with no commit at all: this thread's last claim read when the first scheduled or retry task of its
queues does (``ops.next_due``), and the wait ends then, so the next claim takes it at its due time,
not at the caller's next poll. Writers that do not ring (other tools, versions before the FIFOs per
queue) are seen by ``PRAGMA data_version`` (a read of shared memory, no I/O, no lock), compared with
its value before this thread's last claim every :data:`_WAKE_CHECK_RUNG` s; at once when a FIFO was
not yet listened to at that claim (a ring then may have found no reader); every :data:`_WAKE_CHECK` s
where there is no FIFO. An interrupt ends the waits in progress at once: each wait's ``select`` also
watches a pipe of its own, which the interrupt writes to (``halts.py``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

from conveyor.brokers.interrupts import Interrupts
from conveyor.brokers.sqlite.halts import Pipe, Pipes
from conveyor.brokers.sqlite.wake import Doorbell, wait_any, wake_suffix

__all__ = ["IdleWaits"]

#: How often an idle consumer checks the file for commits by other connections: without a usable
#: wake-up FIFO, and with one (then only for writers that do not ring it: other tools, versions before
#: the FIFOs per queue).
_WAKE_CHECK = 0.002
_WAKE_CHECK_RUNG = 0.5


class IdleWaits:
    """The wake-up FIFOs of one broker's queues, what each thread's last claim saw, and the waits."""

    def __init__(self, path: str, data_version: Callable[[], int]) -> None:
        self._path = path
        self._data_version = data_version
        self._bells: dict[str, Doorbell] = {}  # the wake-up FIFO of each queue this broker used
        self._bells_lock = threading.Lock()
        self._seen = threading.local()  # data_version and time before each thread's last claim
        self._pipes = Pipes()  # a pipe per wait in progress, for an interrupt to write to
        self._halts = Interrupts[Pipe]()

    def bell(self, queue: str) -> Doorbell:
        bell = self._bells.get(queue)
        if bell is None:
            with self._bells_lock:
                bell = self._bells.setdefault(queue, Doorbell(self._path, wake_suffix(queue)))
        return bell

    def claiming(self) -> None:
        """This thread claims now (before the claim: no commit after it goes unseen): what a wait
        compares with is its ``data_version`` and time."""
        self._seen.at = time.monotonic()
        self._seen.version = self._data_version()
        self._seen.due_in = None
        self._halts.claimed()

    def claimed(self, due: float | None, now: float) -> None:
        """The claim made at ``now`` read that the first scheduled or retry task of its queues falls
        due at ``due`` (None: none)."""
        self._seen.due_in = None if due is None else due - now

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` s (see the module's docstring); True is a hint."""
        pipe = self._pipes.take()
        try:
            with self._halts.waiting(pipe) as blocking:
                return self._wait(queues, timeout, pipe.read) if blocking else True
        finally:
            self._pipes.give(pipe)

    def interrupt(self) -> None:
        """End the waits in progress, and the next of each thread that claimed before."""
        for pipe in self._halts.interrupt():
            self._pipes.fire(pipe)

    def _wait(self, queues: Sequence[str], timeout: float, halt: int) -> bool:
        """:meth:`wait`, ``halt`` the read end of its interrupt's pipe."""
        bells = [self.bell(queue) for queue in queues]
        rung = all([bell.listen() for bell in bells])  # before the check: a ring after it is not lost
        seen = getattr(self._seen, "version", None)
        if seen is None:
            seen = self._data_version()
        claimed_at = getattr(self._seen, "at", None)
        due_in = getattr(self._seen, "due_in", None)
        now = time.monotonic()
        deadline = now + timeout
        due_at = claimed_at + due_in if claimed_at is not None and due_in is not None else math.inf
        end = min(deadline, due_at)
        heard = rung and claimed_at is not None and all(bell.heard_since(claimed_at) for bell in bells)
        check_at = now + _WAKE_CHECK_RUNG if heard else now
        while True:
            now = time.monotonic()
            if now >= check_at:
                if self._data_version() != seen:
                    return True
                check_at = now + (_WAKE_CHECK_RUNG if rung else _WAKE_CHECK)
            remaining = end - now
            if remaining <= 0:
                if due_at > deadline:
                    return False
                self._seen.due_in = None  # once: a caller that waits again before claiming sleeps
                return True
            if wait_any(bells if rung else [], min(check_at - now, remaining), halt):
                return True

    def close(self) -> None:
        with self._bells_lock:
            bells, self._bells = list(self._bells.values()), {}
        for bell in bells:
            bell.close()
        self._pipes.close()
