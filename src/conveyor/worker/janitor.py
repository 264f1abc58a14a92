"""Janitor: deletes completed and archived tasks past their retention or beyond the archive cap."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock

__all__ = ["Janitor"]

log = logging.getLogger("conveyor.worker")


class Janitor(Periodic):
    name = "janitor"

    def __init__(self, broker: Broker, clock: Clock, interval: float, batch: int = 1000) -> None:
        super().__init__(interval)
        self.broker = broker
        self.clock = clock
        self.batch = batch

    def tick(self) -> None:
        removed = self.broker.clean(float(self.clock()), self.batch)
        if removed:
            log.debug("janitor: deleted %d finished task(s)", removed)
