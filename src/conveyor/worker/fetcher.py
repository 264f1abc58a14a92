"""Fetcher: claims tasks in batches into a bounded buffer, visiting the queues weighted or in order.

It keeps at most ``concurrency + prefetch`` tasks busy (claimed and not finished): one
``claim(limit=room)`` takes as many as there are free slots (plus the prefetch allowance), so a busy
worker makes one round trip per batch, not per task. Finished tasks whose outcome the acker has not
written yet do not count (the next claim overlaps with the acker's write), but all held tasks
together stay under twice that capacity, so a broker that stops taking acknowledgements stops the
claims too. While the pool still has buffered tasks to start, the fetcher waits for a quarter of its
capacity to be free before claiming again (at most :data:`TOP_UP_WAIT` seconds), so a busy worker
claims in batches rather than one slot at a time. An idle fetcher waits up to ``poll_interval``
before claiming again, woken early by the broker when it can: ``ClaimsAfterWait`` (Redis queues the
claim behind its blocking pop on a notification key) or ``WaitsForWork``; else it sleeps. A full
one waits for a free slot.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from conveyor.brokers.base import ClaimsAfterWait, WaitsForWork
from conveyor.model import TaskRecord
from conveyor.worker.buffer import Buffer
from conveyor.worker.config import WorkerConfig
from conveyor.worker.inflight import Inflight
from conveyor.worker.service import RetryDelay, log_failure

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["TOP_UP_WAIT", "Fetcher", "QueueOrder"]

log = logging.getLogger("conveyor.worker")

#: Longest wait (seconds) for a bigger batch of free slots while buffered tasks remain.
TOP_UP_WAIT = 0.05


class QueueOrder:
    """The order of queues for the next claim: as given (strict), or a weighted random permutation.

    With weights ``emails=3, default=1``, ``emails`` comes first with probability 3/4 (like asynq).
    """

    def __init__(
        self, queues: Sequence[str], weights: Sequence[int] | None, strict: bool, rng: random.Random | None = None
    ) -> None:
        self.queues = list(queues)
        self.weights = list(weights) if weights is not None else None
        self.strict = strict or self.weights is None or len(self.queues) < 2
        self.rng = rng or random.Random()

    def next(self) -> list[str]:
        if self.strict or self.weights is None:
            return list(self.queues)
        names, weights = list(self.queues), list(self.weights)
        order: list[str] = []
        while names:
            pick = self.rng.choices(range(len(names)), weights=weights)[0]
            order.append(names.pop(pick))
            weights.pop(pick)
        return order


class Fetcher:
    """Claims into ``buffer`` (and ``inflight``) until stopped."""

    def __init__(
        self,
        app: Conveyor,
        config: WorkerConfig,
        inflight: Inflight,
        buffer: Buffer,
        order: QueueOrder | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.inflight = inflight
        self.buffer = buffer
        self.order = order or QueueOrder(config.queues, config.weights, config.strict)
        self.capacity = config.concurrency + config.prefetch
        self.held_limit = 2 * self.capacity
        self.min_batch = max(1, self.capacity // 4)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="conveyor-fetcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming; returns once no claim is in flight (what it claimed is in the buffer)."""
        self._stop.set()
        self.inflight.wake()
        if self._thread is not None:
            self._thread.join(timeout=30.0)

    def _loop(self) -> None:
        retry = RetryDelay(min(0.1, self.config.poll_interval), 5.0)  # a broker outage: back off, reconnect
        idle = False  # the last claim found nothing: wait for work before (or while) claiming again
        while not self._stop.is_set():
            room = self.room()
            if room <= 0:
                self.inflight.wait_room(self.capacity, self.held_limit, self.config.poll_interval)
                continue
            if room < self.min_batch and not self.buffer.empty():  # the pool is fed: top up in batches
                wait = min(self.config.poll_interval, TOP_UP_WAIT)
                freed = self.inflight.wait_room(
                    self.capacity - self.min_batch + 1, self.held_limit - self.min_batch + 1, wait
                )
                if not freed and not self.buffer.empty():
                    continue
                room = self.room()
            queues = self.order.next()
            try:
                records = self._wait_and_fetch(room, queues) if idle else self.fetch(room, queues)
            except Exception as exc:
                delay = retry.next()
                log_failure("fetcher: claim", exc, delay)
                self._stop.wait(delay)
                continue
            retry.reset()
            idle = not records

    def room(self) -> int:
        """How many tasks the next claim may take: free slots, within the bound on all held tasks."""
        return self.inflight.room(self.capacity, self.held_limit)

    def _wait_and_fetch(self, room: int, queues: Sequence[str]) -> list[TaskRecord]:
        """Nothing was there last time: wait up to ``poll_interval`` (less when the broker signals new
        work), then claim. A broker that ``ClaimsAfterWait`` does both in one step."""
        broker = self.app.broker
        if isinstance(broker, ClaimsAfterWait):
            return self._hold(
                broker.claim_after_wait(queues, self.app.clock, self.config.lease_for, room, self.config.poll_interval)
            )
        waited = False
        if isinstance(broker, WaitsForWork):
            try:
                broker.wait_for_work(queues, self.config.poll_interval)
                waited = True
            except Exception:
                log.warning("fetcher: waiting for work failed; polling instead", exc_info=True)
        if not waited:
            self._stop.wait(self.config.poll_interval)
        return [] if self._stop.is_set() else self.fetch(room, queues)

    def fetch(self, room: int, queues: Sequence[str] | None = None) -> list[TaskRecord]:
        """Claim up to ``room`` tasks now (from ``queues``, default the next order) into the buffer."""
        queues = self.order.next() if queues is None else queues
        return self._hold(self.app.broker.claim(queues, self.app.now(), self.config.lease_for, room))

    def _hold(self, records: list[TaskRecord]) -> list[TaskRecord]:
        """Claimed: held (heartbeated) and buffered for the pool."""
        self.inflight.add(records)
        self.buffer.put_many(records)
        return records
