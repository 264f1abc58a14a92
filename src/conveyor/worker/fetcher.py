"""Fetcher: claims tasks in batches into a bounded buffer, visiting the queues weighted or in order.

It keeps at most ``concurrency + prefetch`` tasks busy (claimed and not finished; the prefetch
allowance is fixed or follows the slots' speed: ``prefetch.py``): one
``claim(limit=room)`` takes as many as there are free slots (plus the prefetch allowance), so a busy
worker makes one round trip per batch, not per task. Finished tasks whose outcome the acker has not
written yet do not count (the next claim overlaps with the acker's write), but all held tasks
together stay under twice that capacity, so a broker that stops taking acknowledgements stops the
claims too. While the pool still has buffered tasks to start (or another claim is on its way), the
fetcher waits for a quarter of its capacity to be free before claiming again (at most
:data:`TOP_UP_WAIT` seconds), so a busy worker claims in batches rather than one slot at a time.

Several *claimers* (threads) may claim at once (``WorkerConfig.claimers``; two by default on a
broker across the network): while one claim's reply is decoded and handed to the pool, the next is
already running on the server, so neither side waits for the other. Each claim first reserves the
room it asks for in ``inflight``, so together they never exceed the capacity. An idle fetcher waits
up to ``poll_interval`` before claiming again, woken early by the broker when it can:
``ClaimsAfterWait`` (Redis queues the claim behind its blocking pop on a notification key) or
``WaitsForWork``; else it sleeps (a stop ends the wait at once where the broker ``InterruptsWaits``:
every built-in one). Only one claimer waits for work at a time; the others wait for it
to find some. When its wait brings tasks, that claimer keeps the waiting place until the executors
took them (at most :data:`HAND_OVER_WAIT`): otherwise the claimers' next calls (Python code, then a
send) would run first, on the core and under the GIL the executor needs to start the task, and delay
it (docs/performance-notes.md). A full fetcher waits for a free slot.

On a broker that ``SettlesWithClaim`` (SQLite), each claim also settles the outcomes the acker holds
(``Acker.take``): one commit, one disk sync, for both. ``claims_soon`` tells the acker whether to leave
them for the next claim, and the fetcher nudges the acker whenever that stops being true.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from conveyor.brokers.base import ClaimsAfterWait, InterruptsWaits, SettlesWithClaim, WaitsForWork
from conveyor.model import Outcome, TaskRecord
from conveyor.worker.buffer import Buffer
from conveyor.worker.config import WorkerConfig
from conveyor.worker.inflight import Inflight
from conveyor.worker.middleware import call_on_claim
from conveyor.worker.prefetch import MOST, MOST_SYNCED, Prefetch
from conveyor.worker.service import RetryDelay, log_failure

if TYPE_CHECKING:
    from conveyor.host import Host
    from conveyor.worker.acker import Acker

__all__ = ["HAND_OVER_WAIT", "TOP_UP_WAIT", "Fetcher", "QueueOrder", "claim", "settle_and_claim"]

log = logging.getLogger("conveyor.worker")

#: Longest wait (seconds) for a bigger batch of free slots while buffered tasks remain.
TOP_UP_WAIT = 0.05
#: Longest wait (seconds), after a wait for work brought some, for the executors to take it before
#: a claimer makes its next call (see ``Fetcher._round``).
HAND_OVER_WAIT = 0.002


def claim(app: Host, config: WorkerConfig, queues: Sequence[str], limit: int) -> list[TaskRecord]:
    """One ``Broker.claim`` now, timed for the middleware's ``on_claim`` (a claim behind a wait is not)."""
    now = app.now()
    started = time.perf_counter()
    records = app.broker.claim(queues, now, config.lease_for, limit)
    if config.middleware:  # usually none
        call_on_claim(config.middleware, queues, time.perf_counter() - started, len(records))
    return records


def settle_and_claim(
    app: Host,
    config: WorkerConfig,
    broker: SettlesWithClaim,
    outcomes: list[Outcome],
    queues: Sequence[str],
    limit: int,
) -> tuple[list[bool], list[TaskRecord]]:
    """:func:`claim` with ``outcomes`` settled in the same call (the middleware times both)."""
    now = app.now()
    started = time.perf_counter()
    applied, records = broker.settle_and_claim(outcomes, queues, now, config.lease_for, limit)
    if config.middleware:
        call_on_claim(config.middleware, queues, time.perf_counter() - started, len(records))
    return applied, records


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
        app: Host,
        config: WorkerConfig,
        inflight: Inflight,
        buffer: Buffer,
        order: QueueOrder | None = None,
        acker: Acker | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.inflight = inflight
        self.buffer = buffer
        self.order = order or QueueOrder(config.queues, config.weights, config.strict)
        broker = app.broker
        synced = isinstance(broker, SettlesWithClaim)
        most = MOST_SYNCED if synced else MOST
        self.prefetch = Prefetch(
            config.concurrency,
            config.prefetch,
            lambda: inflight.finished_total,
            lambda: inflight.busy_total,
            most=most,
        )
        self.claimers = config.claimers or (2 if isinstance(broker, ClaimsAfterWait) else 1)
        # the acker whose outcomes each claim settles, where the broker does both in one call
        self.acker = acker if synced else None
        self._stop = threading.Event()
        self._idle = False  # the last claim found nothing: wait for work before (or while) claiming again
        self._backing_off = False  # a claim failed: waiting before the next
        self._waiter = threading.Lock()  # held by the one claimer that waits for work
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for number in range(self.claimers):
            name = "conveyor-fetcher" if number == 0 else f"conveyor-fetcher-{number + 1}"
            thread = threading.Thread(target=self._loop, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop claiming; returns once no claim is in flight (what it claimed is in the buffer)."""
        self._stop.set()
        self.inflight.wake()
        self._nudge()
        if isinstance(self.app.broker, InterruptsWaits):
            self.app.broker.interrupt_waits()  # a claimer waiting for work returns now, not at its timeout
        for thread in self._threads:
            thread.join(timeout=30.0)

    def _loop(self) -> None:
        retry = RetryDelay(min(0.1, self.config.poll_interval), 5.0)  # a broker outage: back off, reconnect
        while not self._stop.is_set():
            if not self._idle:
                self._round(retry, wait=False)
            elif self._waiter.acquire(timeout=self.config.poll_interval):  # else another claimer waits
                try:  # it may have found work meanwhile; no top-up wait while holding the waiting place
                    if not self._stop.is_set():  # (stopped while it waited for the place: no wait)
                        self._round(retry, wait=self._idle, top_up=False)
                finally:
                    self._waiter.release()

    def _round(self, retry: RetryDelay, wait: bool, top_up: bool = True) -> None:
        """One claim (after waiting for work if ``wait``) for the room there is, if any."""
        room = self._reserve(top_up)
        if room <= 0:
            return
        queues = self.order.next()
        try:
            records = self._wait_and_claim(room, queues) if wait else self._claim(room, queues)
        except Exception as exc:
            self.inflight.release(room)
            delay = retry.next()
            log_failure("fetcher: claim", exc, delay)
            self._backing_off = True
            self._nudge()
            self._stop.wait(delay)
            self._backing_off = False
            return
        retry.reset()
        self._hold(records, reserved=room)
        self._idle = not records
        if not records:
            self._nudge()  # it waits for work now: nothing settles with a claim until it finds some
        if wait and records:  # work after idleness: started before any claimer runs again
            self.buffer.wait_taken(HAND_OVER_WAIT)

    def _reserve(self, top_up: bool) -> int:
        """Wait for room worth a claim, then reserve it (0: nothing reserved, go round again).

        Without ``top_up`` it takes whatever room there is at once: the claimer holding the one
        waiting place must not sleep for a bigger batch, or no claimer waits for new work meanwhile
        and the idle-to-running tail grows by an order of magnitude (docs/performance-notes.md).
        """
        inflight = self.inflight
        capacity = self.prefetch.capacity()
        held_limit, min_batch = 2 * capacity, max(1, capacity // 4)
        room = inflight.room(capacity, held_limit)
        if room <= 0:
            if self.acker is not None and not self.claims_soon():
                self.acker.nudge()  # only settling frees room now
            inflight.wait_room(capacity, held_limit, self.config.poll_interval)
            return 0
        if room < min_batch and top_up and self._fed():  # top up in batches
            wait = min(self.config.poll_interval, TOP_UP_WAIT)
            freed = inflight.wait_room(capacity - min_batch + 1, held_limit - min_batch + 1, wait)
            if not freed and self._fed():
                return 0
        return inflight.reserve(capacity, held_limit)

    def claims_soon(self) -> bool:
        """A hint for the acker: a claim will come shortly (this fetcher is not idle, stopping or backing
        off, and the bound on held tasks leaves room for a batch: only settling frees that room)."""
        if self._stop.is_set() or self._idle or self._backing_off:
            return False
        capacity = self.prefetch.capacity()
        return 2 * capacity - len(self.inflight) - self.inflight.reserved >= max(1, capacity // 4)

    def _nudge(self) -> None:
        if self.acker is not None:
            self.acker.nudge()

    def _fed(self) -> bool:
        """The pool has buffered tasks to start, or will have when a claim on its way lands."""
        return bool(self.inflight.reserved) or not self.buffer.empty()

    def room(self) -> int:
        """How many tasks the next claim may take: free slots, within the bound on all held tasks."""
        capacity = self.prefetch.capacity()
        return self.inflight.room(capacity, 2 * capacity)

    def _wait_and_claim(self, room: int, queues: Sequence[str]) -> list[TaskRecord]:
        """Nothing was there last time: wait up to ``poll_interval`` (less when the broker signals new
        work), then claim. A broker that ``ClaimsAfterWait`` does both in one step."""
        broker = self.app.broker
        if isinstance(broker, ClaimsAfterWait):
            config = self.config
            return broker.claim_after_wait(queues, self.app.clock, config.lease_for, room, config.poll_interval)
        waited = False
        if isinstance(broker, WaitsForWork):
            try:
                broker.wait_for_work(queues, self.config.poll_interval)
                waited = True
            except Exception:
                log.warning("fetcher: waiting for work failed; polling instead", exc_info=True)
        if not waited:
            self._stop.wait(self.config.poll_interval)
        return [] if self._stop.is_set() else self._claim(room, queues)

    def _claim(self, room: int, queues: Sequence[str]) -> list[TaskRecord]:
        acker = self.acker
        batch = acker.take() if acker is not None else None
        if not batch:
            return claim(self.app, self.config, queues, room)
        assert acker is not None and isinstance(self.app.broker, SettlesWithClaim)
        outcomes = [outcome for _, outcome in batch]
        try:
            applied, records = settle_and_claim(self.app, self.config, self.app.broker, outcomes, queues, room)
        except BaseException:
            acker.give_back(batch)  # written by the acker instead, which retries as it always does
            raise
        acker.settled(batch, applied)
        return records

    def fetch(self, room: int, queues: Sequence[str] | None = None) -> list[TaskRecord]:
        """Claim up to ``room`` tasks now (from ``queues``, default the next order) into the buffer."""
        return self._hold(self._claim(room, self.order.next() if queues is None else queues))

    def _hold(self, records: list[TaskRecord], reserved: int = 0) -> list[TaskRecord]:
        """Claimed: held (heartbeated) and buffered for the pool; ``reserved`` room is used up."""
        self.inflight.add(records, reserved)
        self.buffer.put_many(records)
        return records
