"""Which idle waits an interrupt ends (``InterruptsWaits``), for brokers whose waits block where no
condition of the process reaches them: Redis (a blocking pop on the server) and SQLite (``select``
on FIFOs).

An interrupt ends every wait in progress, and the next wait of each thread whose last claim came
before it, as memory's do (``memory/wake.py``): a fetcher checks its stop flag after each claim, so
one stopped between that check and its wait still returns at once. A thread that never claimed
counts from the broker's start (a worker's second claimer may go straight to its first wait when the
first found the queues empty): any interrupt before its first wait ends that wait.

Each wait registers a *handle* the broker can fire from another thread (Redis: a list its pop also
names; SQLite: a pipe its ``select`` also watches); :meth:`Interrupts.interrupt` returns the handles
of the waits in progress for the broker to fire. A handle fired after its wait ended wakes nobody:
each wait has its own (Redis: a key that expires; SQLite: a pipe emptied before its next wait
registers it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

__all__ = ["Interrupts"]

H = TypeVar("H")


class Interrupts(Generic[H]):
    """The interrupts of one broker's waits, and the handles of the waits in progress. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0  # interrupts so far
        self._waits: dict[int, H] = {}  # a wait in progress (its own number) -> its handle
        self._numbers = 0
        self._mine = threading.local()  # seen: the count at this thread's last claim or wait (else 0)

    def claimed(self) -> None:
        """This thread claims now: its next wait ends only on a later interrupt."""
        self._mine.seen = self._count

    @contextmanager
    def waiting(self, handle: H) -> Iterator[bool]:
        """Register ``handle`` for the wait made inside; yields False when an interrupt came since this
        thread's last claim (the wait must not block: it returns as if woken)."""
        mine = self._mine
        with self._lock:
            interrupted = self._count > getattr(mine, "seen", 0)
            if interrupted:
                mine.seen = self._count
            else:
                self._numbers += 1
                number = self._numbers
                self._waits[number] = handle
        if interrupted:
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                del self._waits[number]
                mine.seen = self._count

    def interrupt(self) -> list[H]:
        """Count an interrupt; the handles of the waits in progress, for the broker to fire."""
        with self._lock:
            self._count += 1
            return list(self._waits.values())
