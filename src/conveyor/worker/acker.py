"""Acker: writes outcomes to the broker in batches (one ``settle`` call for everything ready).

Every settle is fenced by the lease token: an outcome whose lease was lost meanwhile is rejected by
the broker (``False``), logged, and discarded; the task belongs to whoever holds it now. A task stays
in ``inflight`` (and heartbeated) until its outcome is written, so a slow broker cannot lose it.

On a broker that ``SettlesWithClaim`` (SQLite: every commit is a disk sync) the acker *lingers*: while
the fetcher is about to claim (``claims_soon``), it leaves the outcomes for the fetcher to ``take`` and
settle with its claim, in one commit; it settles them itself once ``linger`` seconds have passed since
it began waiting or since the fetcher last took some, or at once when the fetcher nudges it
(idle, backing off, or held back by the bound on held tasks) or the acker is stopping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor.errors import BrokerError
from conveyor.model import Outcome
from conveyor.worker.events import event_level, log_event, outcome_event
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.service import RetryDelay, log_failure

if TYPE_CHECKING:
    from conveyor.host import Host

__all__ = ["Acker"]

log = logging.getLogger("conveyor.worker")

_BATCH = 256
_STOP = None


class Acker:
    """Settles outcomes on its own thread; ``settle_now`` does it in the caller's thread."""

    def __init__(self, app: Host, inflight: Inflight, retry_every: float = 0.5, linger: float = 0.0) -> None:
        self.app = app
        self.inflight = inflight
        self.retry_every = retry_every
        self.linger = linger
        #: Whether a claimer will take the outcomes soon (set by the runtime to the fetcher's hint).
        self.claims_soon: Callable[[], bool] = lambda: False
        # Outcomes written, counted once per batch: ``failed`` counts retries and archives alike (the
        # registry's figure), ``retried`` the retries alone.
        self.processed = 0
        self.failed = 0
        self.retried = 0
        # A deque and an Event rather than a queue.Queue: a submit is an append (thread-safe) and, only
        # when the acker sleeps, one set(); the acker takes everything there at once (a Queue's put +
        # get is Python code around a lock, dearer per task; docs/performance-notes.md).
        self._items: deque[tuple[Held, Outcome] | None] = deque()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._nudged = threading.Event()  # stop lingering: look at claims_soon() again
        self._taken_at = 0.0  # monotonic time of the last take()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="conveyor-acker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write everything submitted so far, then stop."""
        self._closed = True
        self._nudged.set()
        self._put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout=30.0)

    def counts(self) -> tuple[int, int, int]:
        """``(processed, failed, retried)`` so far, read together."""
        with self._lock:
            return self.processed, self.failed, self.retried

    def submit(self, held: Held, outcome: Outcome) -> None:
        if self._closed:
            log.warning("task %s finished after shutdown; its lease was already released", held.id)
            return
        self._put((held, outcome))

    def _put(self, item: tuple[Held, Outcome] | None) -> None:
        self._items.append(item)
        if not self._ready.is_set():
            self._ready.set()

    def _loop(self) -> None:
        while True:
            if not self._items:
                self._ready.wait()
            # cleared before taking: an item appended from here on sets it again (nothing is missed)
            self._ready.clear()
            if self.linger:
                self._linger()
            batch, stopping = self._pop(keep_stop=False)
            if batch:
                self._write(batch, persistent=True)
            if stopping:
                return

    def _pop(self, keep_stop: bool) -> tuple[list[tuple[Held, Outcome]], bool]:
        """The outcomes waiting, in order, at most a batch, and whether the stop marker was met. With
        ``keep_stop`` the marker ends the batch and stays first in line; without, it is taken and the
        batch goes on past it."""
        batch: list[tuple[Held, Outcome]] = []
        stopping = False
        items = self._items
        while len(batch) < _BATCH:
            try:
                item = items.popleft()
            except IndexError:
                break
            if item is None:
                stopping = True
                if keep_stop:
                    items.appendleft(item)
                    break
                continue
            batch.append(item)
        return batch, stopping

    def _linger(self) -> None:
        """Leave the outcomes to a claimer while it is about to claim (see the module docstring)."""
        deadline = time.monotonic() + self.linger
        while self._items and not self._closed and self.claims_soon():
            left = max(deadline, self._taken_at + self.linger) - time.monotonic()
            if left <= 0:
                return
            self._nudged.wait(left)
            self._nudged.clear()

    def nudge(self) -> None:
        """The claimer will not claim soon: settle what is waiting now instead of lingering."""
        self._nudged.set()

    def take(self) -> list[tuple[Held, Outcome]]:
        """The outcomes waiting (at most a batch), for a claimer to settle with its claim; it hands them
        to :meth:`settled` once written, or back with :meth:`give_back` if its call failed."""
        batch, _ = self._pop(keep_stop=True)  # the stop marker stays for the acker's own loop
        if batch:
            self._taken_at = time.monotonic()
        return batch

    def give_back(self, batch: list[tuple[Held, Outcome]]) -> None:
        """Outcomes a claimer took but could not write: the acker writes them (first, in their order)."""
        self._items.extendleft(reversed(batch))
        self._nudged.set()
        self._ready.set()

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
        self.settled(batch, applied)
        return applied

    def settled(self, batch: list[tuple[Held, Outcome]], applied: list[bool]) -> None:
        """``batch`` was settled (``applied``: the broker's answer for each): log each result, count, and
        drop the tasks from ``inflight``."""
        now = time.monotonic()
        # checked once per batch (log_event() checks per call): successes at DEBUG, the rest at INFO
        log_completed = log.isEnabledFor(event_level("completed"))
        log_others = log.isEnabledFor(logging.INFO)
        processed = failed = retried = 0
        for (held, outcome), ok in zip(batch, applied, strict=True):
            if ok:
                kind = outcome.kind
                if log_completed if kind == "complete" else log_others:
                    duration = None if held.started is None else now - held.started
                    log_event(held.record, outcome_event(outcome), duration, error=outcome.error, reason=outcome.reason)
                processed += 1
                if kind != "complete":
                    failed += kind in ("retry", "archive")
                    retried += kind == "retry"
            elif held.cancelled:  # expected: the cancel archived it and revoked the lease
                log_event(held.record, "discarded", reason="cancelled")
            else:
                log.warning(
                    "task %s (%s): lease lost before %s was written; result discarded (fenced)",
                    held.id,
                    held.record.name,
                    outcome.kind,
                )
        with self._lock:
            self.processed += processed
            self.failed += failed
            self.retried += retried
        self.inflight.remove([held for held, _ in batch])
