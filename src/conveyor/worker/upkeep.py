"""The broker's upkeep on timers, even with no traffic: promote due tasks, reap expired leases, clean.

Each is a :class:`Periodic` service calling one broker operation with the clock's ``now`` and a batch
size; only what a tick does with the answer differs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock

__all__ = ["Janitor", "Promoter", "Reaper", "Upkeep"]

log = logging.getLogger("conveyor.worker")


class Upkeep(Periodic):
    """A periodic broker operation: ``tick()`` reads ``now`` from ``clock`` and works in ``batch``es."""

    def __init__(self, broker: Broker, clock: Clock, interval: float, batch: int = 1000) -> None:
        super().__init__(interval)
        self.broker = broker
        self.clock = clock
        self.batch = batch

    def now(self) -> float:
        return float(self.clock())


class Promoter(Upkeep):
    """Moves due scheduled and retry tasks to pending."""

    name = "promoter"

    def tick(self) -> None:
        while self.broker.promote(self.now(), self.batch) >= self.batch:
            pass  # a full batch: more may be due


class Reaper(Upkeep):
    """Reclaims expired leases (tasks of dead or paused workers): a reclaimed task is pending again,
    or archived ``poison`` once its lease expired ``max_stalls`` times."""

    name = "reaper"

    def tick(self) -> None:
        reclaimed = self.broker.reap(self.now(), self.batch)
        if reclaimed:
            log.info("reaper: reclaimed %d expired lease(s)", reclaimed)


class Janitor(Upkeep):
    """Deletes completed and archived tasks past their retention or beyond the archive cap."""

    name = "janitor"

    def tick(self) -> None:
        removed = self.broker.clean(self.now(), self.batch)
        if removed:
            log.debug("janitor: deleted %d finished task(s)", removed)
