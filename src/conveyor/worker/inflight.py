"""``Inflight``: the tasks this worker holds a lease on (prefetched or running), shared by services.

The fetcher adds claimed tasks; the pool marks them running, then *finished* (outcome handed to the
acker); the heartbeat extends their leases; the acker removes them once settled. A finished task still
holds its lease until the acker's write lands, but it no longer occupies a slot: ``busy`` counts only
tasks claimed and not yet finished, so the fetcher claims the next batch while the acker writes the
last one (client and broker work overlap instead of taking turns). ``wait_room`` lets the fetcher
sleep until a slot frees up. A claim in flight holds a *reservation* of the room it asked for
(``reserve``, then ``add(records, reserved=n)`` or ``release(n)``), so several claims at once never
take more than the room there was.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conveyor.model import TaskRecord
from conveyor.worker.executor import Job

__all__ = ["Held", "Inflight"]

_NEVER = 1 << 62  # a count of finished tasks never reached


@dataclass(eq=False)
class Held:
    """One held task. ``job`` and ``started`` are set when it starts running."""

    record: TaskRecord
    token: str
    renewed: float = field(default_factory=time.monotonic)  # claimed, or last extended (monotonic)
    job: Job | None = None
    started: float | None = None
    future: concurrent.futures.Future[Any] | None = None
    lost: bool = False
    cancelled: bool = False  # lost to an operator's cancel (``lost`` is set too)
    overdue_logged: bool = False
    finished: bool = False  # its outcome is with the acker

    @property
    def id(self) -> str:
        return self.record.id

    def begin(self, job: Job) -> None:
        """It starts running as ``job`` (through ``Inflight.start``); its handler sees ``ctx.lease_lost``
        from the start if the lease was lost meanwhile (``mark_lost`` found no job to tell then)."""
        self.job = job
        self.started = time.monotonic()
        if self.cancelled:
            job.ctx.mark_cancelled()
        if self.lost:
            job.ctx.mark_lease_lost()

    def run_async(self, future: concurrent.futures.Future[Any]) -> None:
        """Its async handler was submitted to the loop as ``future``; cancelled at once if the lease was
        lost meanwhile (``mark_lost`` on the heartbeat's thread found no future to cancel then)."""
        self.future = future
        if self.lost:
            future.cancel()

    def mark_cancelled(self) -> None:
        """An operator cancelled it (the broker revoked the lease): the handler sees ``ctx.cancelled``.
        Called before ``mark_lost``, so the handler reads both flags set once it sees ``lease_lost``."""
        self.cancelled = True
        if self.job is not None:
            self.job.ctx.mark_cancelled()

    def mark_lost(self) -> None:
        """This worker no longer holds the lease: the handler sees ``ctx.lease_lost``; async is cancelled."""
        self.lost = True
        if self.job is not None:
            self.job.ctx.mark_lease_lost()
        if self.future is not None:
            self.future.cancel()  # async handler: cancelled on its loop


class Inflight:
    """A thread-safe map of held tasks by id."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._finished = 0  # held tasks whose outcome is with the acker
        self.finished_total = 0  # tasks finished since the start (the adaptive prefetch's speed)
        self.busy_total = 0.0  # seconds those tasks held their slots, summed
        self._reserved = 0  # room taken by claims in flight (see reserve())
        self._wanted: list[tuple[int, int]] = []  # what each waiting wait_room() needs
        # finish() wakes the waiters once _finished reaches this (see _arm()): one comparison per
        # task instead of checking each waiter's room, which a saturated worker did for nearly every
        # task (a claimer waits for room nearly all the time then)
        self._wake_at = _NEVER
        # The hot paths (get, finish) use the lock directly: a Condition's __enter__/__exit__ are
        # Python code around it, paid several times per task.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)

    def add(self, records: Iterable[TaskRecord], reserved: int = 0) -> list[Held]:
        """Hold ``records``; ``reserved`` is the reservation of the claim that took them (now used)."""
        renewed = time.monotonic()
        added = []
        for record in records:
            assert record.lease_token is not None
            added.append(Held(record, record.lease_token, renewed))
        # built before taking the lock: an executor finishing a task waits for this lock, and one held
        # across a batch's constructions is one a GIL switch can leave held for milliseconds
        displaced: list[Held] = []  # claimed again: the broker reclaimed a lease we still held
        with self._cond:
            self._reserved -= reserved
            for held in added:
                previous = self._held.get(held.id)
                if previous is not None:
                    self._finished -= previous.finished  # its remove() will not find it any more
                    displaced.append(previous)
                self._held[held.id] = held
            if len(added) < reserved:  # room the claim did not use is free again
                self._cond.notify_all()
        # Marked lost once the lock is released: cancelling an async handler's future runs its done
        # callbacks in this thread, and the pool's calls remove(), which takes this lock.
        for previous in displaced:
            if not previous.lost:
                previous.mark_lost()
        return added

    def start(self, held: Held, job: Job) -> bool:
        """``held`` starts running as ``job`` (``Held.begin``), unless it lost its lease or was claimed
        again first: then False, and it must not run (``lose`` dropped it: nothing would report or settle
        it). One lock decides which came first, so a task is either never started or stays held."""
        with self._lock:
            if held.lost or self._held.get(held.id) is not held:
                return False
            held.begin(job)
            return True

    def lose(self, held: Held) -> bool:
        """``held`` lost its lease; True if it had started (its handler is told to stop and its end
        removes it), False if not: then it is dropped here and ``start`` refuses it from now on."""
        with self._lock:
            held.lost = True
            started = held.job is not None
        if not started:
            self.remove([held])
        return started

    def get(self, task_id: str) -> Held | None:
        return self._held.get(task_id)  # one dict lookup: atomic, no lock needed

    def remove(self, helds: Iterable[Held]) -> None:
        with self._cond:
            for held in helds:
                if self._held.get(held.id) is held:
                    del self._held[held.id]
                    self._finished -= held.finished
            self._cond.notify_all()

    def finish(self, held: Held) -> None:
        """``held`` ran; its outcome goes to the acker: it stops counting as ``busy``."""
        with self._lock:
            if held.finished or self._held.get(held.record.id) is not held:
                return
            held.finished = True
            self._finished += 1
            self.finished_total += 1
            if held.started is not None:
                self.busy_total += time.monotonic() - held.started
            if self._finished >= self._wake_at:  # a wait_room() has room now
                self._wake_at = _NEVER
                self._cond.notify_all()

    def busy(self) -> int:
        """Held tasks not finished yet (buffered or running)."""
        with self._cond:
            return len(self._held) - self._finished

    def room(self, busy_below: int, held_below: int) -> int:
        """How many more may be claimed with ``busy()`` kept under ``busy_below`` and all held under
        ``held_below`` (one consistent reading of both), counting the room reserved by claims in flight."""
        with self._cond:
            return self._room(busy_below, held_below)

    def _room(self, busy_below: int, held_below: int) -> int:
        held = len(self._held) + self._reserved
        return min(busy_below - (held - self._finished), held_below - held)

    def reserve(self, busy_below: int, held_below: int) -> int:
        """Reserve all the room there is now (``room()``, 0 if none) for a claim about to be sent."""
        with self._cond:
            room = max(0, self._room(busy_below, held_below))
            self._reserved += room
            return room

    def release(self, reserved: int) -> None:
        """Give back a reservation whose claim failed."""
        with self._cond:
            self._reserved -= reserved
            self._cond.notify_all()

    @property
    def reserved(self) -> int:
        """Room reserved by claims in flight."""
        return self._reserved

    def _has_room(self, busy_below: int, held_below: int) -> bool:
        return self._room(busy_below, held_below) > 0

    def wait_room(self, busy_below: int, held_below: int, timeout: float) -> bool:
        """Wait (at most ``timeout``) until ``busy() < busy_below`` and fewer than ``held_below`` are held
        (reservations counted as held)."""
        wanted = (busy_below, held_below)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._wanted.append(wanted)
            try:
                while not self._has_room(busy_below, held_below):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._arm()
                    self._cond.wait(left)
                return True
            finally:
                self._wanted.remove(wanted)
                self._arm()

    def _arm(self) -> None:
        """Set the ``_finished`` count at which ``finish()`` wakes the waiters (lock held).

        A waiter has room once ``busy_below - (held - finished) > 0`` with ``held`` (reservations
        counted) under ``held_below``; ``finish()`` changes only ``finished``. Every other change
        that can make room (``remove``, ``release``, a claim that used less than it reserved)
        notifies anyway, and one that takes room (``reserve``) at worst makes a wake-up early:
        each waiter re-arms before it waits again."""
        held = len(self._held) + self._reserved
        wake_at = _NEVER
        for busy_below, held_below in self._wanted:
            if held < held_below:
                wake_at = min(wake_at, held - busy_below + 1)
        self._wake_at = wake_at

    def snapshot(self) -> list[Held]:
        with self._cond:
            return list(self._held.values())

    def __len__(self) -> int:
        with self._cond:
            return len(self._held)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_empty(self, deadline: float) -> bool:
        """Wait until nothing is held or ``time.monotonic()`` passes ``deadline``; True if empty."""
        with self._cond:
            while self._held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True
