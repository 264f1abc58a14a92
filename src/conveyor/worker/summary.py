"""Summary: one INFO line every ``summary_interval`` seconds saying what this worker did.

A task's start and its success are logged at DEBUG (``runner.py``), so at INFO this line is how an
operator sees a healthy worker work: tasks done, failed (archived) and retried since the last line,
their rate, and the slots busy now. It is written only when something happened in the interval or a
slot is busy, so an idle worker's log stays quiet; when the worker stops, the part of an interval
not yet reported gets a last line. The counts come from the acker, which adds them once per settled
batch: no work at all per task here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from conveyor.worker.service import Periodic

__all__ = ["Counts", "Summary"]

log = logging.getLogger("conveyor.worker")

#: (written outcomes, retries + archives, retries) since the worker started: see ``Acker.counts``.
Counts = tuple[int, int, int]


class Summary(Periodic):
    name = "summary"

    def __init__(
        self,
        worker_id: str,
        interval: float,
        counts: Callable[[], Counts],
        busy: Callable[[], int],
        slots: int,
    ) -> None:
        super().__init__(interval)
        self.worker_id = worker_id
        self.counts = counts
        self.busy = busy
        self.slots = slots
        self._last: Counts = (0, 0, 0)
        self._since = time.monotonic()

    def tick(self) -> None:
        self.report(final=False)

    def stop(self) -> None:
        super().stop()
        self.report(final=True)

    def report(self, final: bool) -> str | None:
        """Log (and return) the line for the time since the last one; None when there is nothing to say."""
        now = time.monotonic()
        counts, busy = self.counts(), self.busy()
        processed, failures, retried = (new - old for new, old in zip(counts, self._last, strict=True))
        elapsed = now - self._since
        self._last, self._since = counts, now
        if not processed and not busy:
            return None
        done, failed = processed - failures, failures - retried
        rate = processed / elapsed if elapsed > 0 else 0.0
        line = (
            f"worker {self.worker_id}: {'last ' if final else ''}{elapsed:.1f} s: {done} done, {failed} failed, "
            f"{retried} retried ({rate:.1f}/s), {busy}/{self.slots} slots busy"
        )
        log.info(
            "%s",
            line,
            extra={
                "conveyor": {
                    "event": "summary",
                    "done": done,
                    "failed": failed,
                    "retried": retried,
                    "rate": round(rate, 1),
                    "busy": busy,
                }
            },
        )
        return line
