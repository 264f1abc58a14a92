"""Heartbeat: extends the lease of every task this worker holds, every ``heartbeat_interval``.

A lease that cannot be extended is lost (the worker was paused or partitioned past its lease and
another worker may run the task now, or an operator cancelled the task): the task's ``ctx.lease_lost``
is set, an async handler is cancelled, and whatever the handler returns later is fenced by the broker
(``settle`` → False). A cancel (the task is archived ``cancelled``: one ``get`` tells) also sets
``ctx.cancelled`` and is reported (``Reporter.cancelled``: a ``--processes`` supervisor stops the
child whose sync handler does not return soon). A sync task running
past its timeout is logged here once and its ``ctx.timed_out`` set, so a cooperative handler can stop
(Python cannot interrupt a thread; see docs/reliability.md).

A lease claimed or extended less than half an interval ago is left alone when that still leaves at
least one interval of margin at the next tick: a busy worker holding hundreds of short tasks makes no
extend calls for them at all. Leases are then renewed at most 1.5 intervals apart, so a pause of the
worker shorter than ``lease_for - 1.5 * interval`` (7 s with the defaults) never loses one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from conveyor.errors import BrokerError
from conveyor.worker.events import log_event
from conveyor.worker.executor import lost_to_cancel
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock
    from conveyor.worker.pool import Reporter

__all__ = ["Heartbeat"]

log = logging.getLogger("conveyor.worker")


class Heartbeat(Periodic):
    name = "heartbeat"

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        inflight: Inflight,
        interval: float,
        lease_for: float,
        reporter: Reporter | None = None,
    ) -> None:
        super().__init__(interval)
        self.broker = broker
        self.clock = clock
        self.inflight = inflight
        self.lease_for = lease_for
        self.reporter = reporter
        self._losing = threading.Lock()

    def tick(self) -> None:
        fresh_for = min(self.interval / 2, self.lease_for - 2 * self.interval)
        due = [
            held for held in self.inflight.snapshot() if not held.lost and time.monotonic() - held.renewed >= fresh_for
        ]
        for done, held in enumerate(due):
            try:
                self._renew(held)
            except BrokerError as exc:  # the store is out of reach: the next tick tries them all again
                log.warning("heartbeat: could not extend %d lease(s): %s; retrying", len(due) - done, exc)
                return

    def renew(self, held: Held) -> None:
        """Extend ``held``'s lease now; if it is lost, stop its handler (``lost``). Also called at once,
        outside the ticks, for a task whose cancel the broker announced (``worker/cancels.py``)."""
        try:
            self._renew(held)
        except BrokerError as exc:
            log.warning("heartbeat: could not extend the lease of task %s: %s; retrying", held.id, exc)

    def _renew(self, held: Held) -> None:
        """:meth:`renew`, its ``BrokerError`` raised: one line a tick says the store is out of reach,
        not one per task with its traceback (a worker of 100 slots would write 100 a second)."""
        started = time.monotonic()
        status = self.broker.extend(held.id, held.token, float(self.clock()), self.lease_for)
        if status is None:
            # A finished task's outcome is with the acker, which may have just settled it (the lease
            # is gone because the task is done): its settle tells whether the lease was really lost.
            if not held.finished:
                self.lost(held)
            return
        held.renewed = started
        if status.cancel_requested and held.job is not None:
            held.job.ctx.mark_cancelled()
        self._check_overdue(held)

    def lost(self, held: Held) -> None:
        """The lease is gone: stop the handler cooperatively (an async one is cancelled); never commit
        its result. If an operator's cancel took it, the handler sees ``ctx.cancelled`` too."""
        with self._losing:  # the ticks and an announced cancel may find the same lease lost at once
            if held.lost:
                return
            self._lose(held)

    def _lose(self, held: Held) -> None:
        cancelled = lost_to_cancel(self.broker, self.clock, held.id)
        if cancelled:
            held.mark_cancelled()
            log_event(held.record, "cancelled")
        else:
            log_event(held.record, "lease-lost")
        # Decided against the pool's start under the inflight's lock: one not started yet never starts
        # (dropped now); one started stays held until it ends, and its cancel is reported.
        started = self.inflight.lose(held)
        held.mark_lost()
        if started and cancelled and self.reporter is not None and not held.finished:
            self.reporter.cancelled(held)
        if started and held.future is not None:
            self.inflight.remove([held])  # async (cancelled): nothing will settle it

    def _check_overdue(self, held: Held) -> None:
        job = held.job
        if job is None or job.is_async or held.started is None or held.overdue_logged:
            return
        timeout = job.options.timeout
        if timeout is not None and time.monotonic() - held.started > timeout:
            held.overdue_logged = True
            job.ctx.mark_timed_out()
            log.warning("task %s is past its %s s timeout; it fails when it returns", held.id, timeout)
