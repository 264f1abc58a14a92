"""Reaper: reclaims expired leases (tasks of dead or paused workers) on a timer, even with no traffic.

A reclaimed task is pending again, or archived ``poison`` once its lease expired ``max_stalls`` times.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock

__all__ = ["Reaper"]

log = logging.getLogger("conveyor.worker")


class Reaper(Periodic):
    name = "reaper"

    def __init__(self, broker: Broker, clock: Clock, interval: float, batch: int = 1000) -> None:
        super().__init__(interval)
        self.broker = broker
        self.clock = clock
        self.batch = batch

    def tick(self) -> None:
        reclaimed = self.broker.reap(float(self.clock()), self.batch)
        if reclaimed:
            log.info("reaper: reclaimed %d expired lease(s)", reclaimed)
