"""``Worker``: what users hold, bound to an app; claims tasks from its queues and runs them. Step it by
hand (``process_next``, in the calling thread), or run it (``run()``: a ``Runtime`` composes the
background services until shutdown)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from conveyor.model import Outcome, TaskRecord
from conveyor.worker import runtime as rt
from conveyor.worker.config import WorkerConfig
from conveyor.worker.events import log_event, outcome_event
from conveyor.worker.executor import Executor
from conveyor.worker.fetcher import claim
from conveyor.worker.runner import Runner

if TYPE_CHECKING:
    from conveyor.host import Host
    from conveyor.worker.pool import Reporter

__all__ = ["Worker"]

log = logging.getLogger("conveyor.worker")


class Worker:
    """A worker bound to an app. ``process_next()`` / ``run_until_idle()`` run tasks in this thread;
    ``run()`` serves until ``stop()`` or SIGTERM/SIGINT."""

    def __init__(self, app: Host, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.executor = Executor(app, self.config)
        self.runner = Runner(self.executor, self.config.middleware)
        self._runtime: rt.Runtime | None = None
        self._stop_requested = threading.Event()
        self._stop_signalled = False  # set by a signal handler (stop_from_signal)

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues this worker serves, in ``config`` order."""
        return self.config.queues

    def process_next(self) -> bool:
        """Run at most one runnable task now, in this thread. True if one was claimed."""
        claimed = claim(self.app, self.config, list(self.config.queues), 1)
        if not claimed:
            return False
        record = claimed[0]
        prepared = self.executor.prepare(record)
        started = time.monotonic()
        if isinstance(prepared, Outcome):
            outcome = prepared
        else:
            log_event(record, "started")
            outcome = self.runner.run_sync(prepared)
        if self.settle(record, outcome):
            log_event(record, outcome_event(outcome), time.monotonic() - started, error=outcome.error)
        return True

    def run_until_idle(self, limit: int | None = None) -> int:
        """Run tasks until none is runnable at the current clock time (or ``limit`` ran); returns count."""
        ran = 0
        while (limit is None or ran < limit) and self.process_next():
            ran += 1
        return ran

    def settle(self, record: TaskRecord, outcome: Outcome) -> bool:
        """Apply an outcome; False (logged) if the lease was lost meanwhile."""
        applied = self.app.broker.settle([outcome], self.app.now())[0]
        if not applied:
            log.warning("task %s (%s): lease lost before %s; result discarded", record.id, record.name, outcome.kind)
        return applied

    def run(self, *, install_signals: bool = True, reporter: Reporter | None = None) -> int:
        """Serve until ``stop()`` (or, in the main thread, SIGTERM/SIGINT); returns the exit code."""
        runtime = rt.Runtime(self.app, self.config, self.executor, reporter=reporter)
        self._runtime = runtime
        if self._stop_requested.is_set() or self._stop_signalled:
            runtime.request_stop()
        previous = rt.install_signals(runtime.on_signal) if install_signals else {}
        try:
            return runtime.run()
        finally:
            rt.restore_signals(previous)

    @property
    def runtime(self) -> rt.Runtime | None:
        """The running runtime (None before ``run()``)."""
        return self._runtime

    def stop(self) -> None:
        """Ask a running ``run()`` to shut down gracefully (from any thread)."""
        self._stop_requested.set()
        if self._runtime is not None:
            self._runtime.request_stop()

    def stop_from_signal(self) -> None:
        """:meth:`stop` for a signal handler: flags only, no lock (``Runtime.stop_from_signal``)."""
        self._stop_signalled = True
        runtime = self._runtime
        if runtime is not None:
            runtime.stop_from_signal()
