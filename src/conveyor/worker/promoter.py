"""Promoter: moves due scheduled and retry tasks to pending, on a timer."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock

__all__ = ["Promoter"]

log = logging.getLogger("conveyor.worker")


class Promoter(Periodic):
    name = "promoter"

    def __init__(self, broker: Broker, clock: Clock, interval: float, batch: int = 1000) -> None:
        super().__init__(interval)
        self.broker = broker
        self.clock = clock
        self.batch = batch

    def tick(self) -> None:
        while self.broker.promote(float(self.clock()), self.batch) >= self.batch:
            pass  # a full batch: more may be due
