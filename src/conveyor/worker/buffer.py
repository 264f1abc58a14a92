"""``Buffer``: claimed tasks waiting for an executor thread, handed over with as few wake-ups as possible.

The fetcher adds a whole claimed batch at once; executor threads take one task at a time. A thread
that finds the buffer non-empty takes a task without blocking or waking anyone, so a busy pool runs
task after task on the threads that already hold the GIL instead of switching threads per task.
Sleeping threads are woken one at a time, and only one wake-up is ever in flight: the woken thread,
once it runs and takes a task, wakes the next if work is left (a chain). So threads join in as fast as
the running ones give up the GIL (a handler waiting on I/O lets the next one start at once), while a
stream of short tasks does not wake a thread per task (that costs two context switches each on a
busy core; docs/performance-notes.md).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from conveyor.model import TaskRecord

__all__ = ["Buffer"]


class Buffer:
    """A FIFO of claimed records; ``close()`` makes every ``get`` return None from then on."""

    def __init__(self) -> None:
        self._items: deque[TaskRecord] = deque()
        # taken directly rather than through the Condition (whose __enter__/__exit__ are Python code)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        self._sleeping = 0
        self._waking = False  # a sleeping thread was notified and has not run yet
        self._drained = threading.Condition(self._lock)  # the buffer became empty (see wait_taken)
        self._watched = False  # someone waits in wait_taken

    def put_many(self, records: Iterable[TaskRecord]) -> None:
        with self._lock:
            self._items.extend(records)
            if self._items:
                self._wake_one()

    def get(self) -> TaskRecord | None:
        """The oldest record, waiting for one if need be; None once closed."""
        with self._lock:
            while not self._items:
                if self._closed:
                    return None
                self._sleeping += 1
                try:
                    self._cond.wait()
                finally:
                    self._sleeping -= 1
                    self._waking = False
            if self._closed:
                return None
            record = self._items.popleft()
            if self._items:
                self._wake_one()  # more work: let the next sleeping thread take some
            elif self._watched:
                self._drained.notify_all()
            return record

    def wait_taken(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until every buffered record was taken (or the buffer
        closed): True if it is empty. The caller gives up the GIL and the core meanwhile."""
        with self._lock:
            if not self._items or self._closed:
                return True
            self._watched = True
            try:
                return self._drained.wait_for(lambda: not self._items or self._closed, timeout)
            finally:
                self._watched = False

    def _wake_one(self) -> None:
        if self._sleeping and not self._waking:
            self._waking = True
            self._cond.notify()

    def close(self) -> list[TaskRecord]:
        """Stop handing out records; returns those still buffered (never handed out)."""
        with self._cond:
            self._closed = True
            left = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            self._drained.notify_all()
            return left

    @property
    def closed(self) -> bool:
        return self._closed

    def empty(self) -> bool:
        return not self._items
