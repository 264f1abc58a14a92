"""Acker: writes outcomes to the broker in batches (one ``settle`` call for everything ready).

Every settle is fenced by the lease token: an outcome whose lease was lost meanwhile is rejected by
the broker (``False``), logged, and discarded; the task belongs to whoever holds it now. A task stays
in ``inflight`` (and heartbeated) until its outcome is written, so a slow broker cannot lose it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from conveyor.errors import BrokerError
from conveyor.model import Outcome
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.runner import log_event, outcome_event
from conveyor.worker.service import RetryDelay, log_failure

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Acker"]

log = logging.getLogger("conveyor.worker")

_BATCH = 256
_STOP = None


class Acker:
    """Settles outcomes on its own thread; ``settle_now`` does it in the caller's thread."""

    def __init__(self, app: Conveyor, inflight: Inflight, retry_every: float = 0.5) -> None:
        self.app = app
        self.inflight = inflight
        self.retry_every = retry_every
        self.processed = 0
        self.failed = 0
        self._queue: queue.Queue[tuple[Held, Outcome] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="conveyor-acker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write everything submitted so far, then stop."""
        self._closed = True
        self._queue.put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout=30.0)

    def submit(self, held: Held, outcome: Outcome) -> None:
        if self._closed:
            log.warning("task %s finished after shutdown; its lease was already released", held.id)
            return
        self._queue.put((held, outcome))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            stopping = item is _STOP
            batch = [] if item is None else [item]
            while len(batch) < _BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    continue
                batch.append(more)
            if batch:
                self._write(batch, persistent=True)
            if stopping:
                return

    def _write(self, batch: list[tuple[Held, Outcome]], persistent: bool) -> None:
        retry = RetryDelay(min(0.1, self.retry_every), 5.0)
        while True:
            try:
                self.settle_now(batch)
                return
            except BrokerError as exc:
                if not persistent:
                    raise
                delay = retry.next()
                log_failure(f"acker: settle of {len(batch)} outcome(s)", exc, delay)
                time.sleep(delay)  # a broker outage: the leases are still heartbeated

    def settle_now(self, batch: list[tuple[Held, Outcome]]) -> list[bool]:
        """Settle ``batch`` in one call, log each result, and drop the tasks from ``inflight``."""
        applied = self.app.broker.settle([outcome for _, outcome in batch], self.app.now())
        now = time.monotonic()
        for (held, outcome), ok in zip(batch, applied, strict=True):
            duration = None if held.started is None else now - held.started
            if ok:
                log_event(held.record, outcome_event(outcome), duration, error=outcome.error, reason=outcome.reason)
                with self._lock:
                    self.processed += 1
                    self.failed += outcome.kind in ("retry", "archive")
            else:
                log.warning(
                    "task %s (%s): lease lost before %s was written; result discarded (fenced)",
                    held.id,
                    held.record.name,
                    outcome.kind,
                )
        self.inflight.remove([held for held, _ in batch])
        return applied
