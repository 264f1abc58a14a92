"""Throughput and failure counts over time, from the broker's state-change events.

An execution ends when a task leaves ``active`` for ``completed``, ``retry`` or ``archived``; it failed
when it went to ``retry`` or ``archived``. Counts are kept in fixed-width time buckets of the wall clock
(injected), the last ``size`` of them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from conveyor.model import Event

__all__ = ["Throughput"]


class Throughput:
    """Executions and failures per ``bucket`` seconds over the last ``size`` buckets."""

    def __init__(self, bucket: float = 2.0, size: int = 150, clock: Callable[[], float] = time.time) -> None:
        self.bucket = bucket
        self.size = size
        self.clock = clock
        self._lock = threading.Lock()
        self._counts: OrderedDict[int, list[int]] = OrderedDict()

    def record(self, event: Event) -> None:
        """Broker subscriber: count executions that ended."""
        if event.old_state != "active" or event.new_state not in ("completed", "retry", "archived"):
            return
        key = int(self.clock() // self.bucket)
        with self._lock:
            counts = self._counts.setdefault(key, [0, 0])
            counts[0] += 1
            if event.new_state != "completed":
                counts[1] += 1
            while len(self._counts) > self.size:
                self._counts.popitem(last=False)

    def snapshot(self) -> dict[str, Any]:
        """``{"bucket": s, "t": [bucket starts], "processed": [...], "failed": [...]}``, oldest first,
        ending with the current (partial) bucket."""
        last = int(self.clock() // self.bucket)
        keys = range(last - self.size + 1, last + 1)
        with self._lock:
            rows = [self._counts.get(k, [0, 0]) for k in keys]
        return {
            "bucket": self.bucket,
            "t": [k * self.bucket for k in keys],
            "processed": [r[0] for r in rows],
            "failed": [r[1] for r in rows],
        }
