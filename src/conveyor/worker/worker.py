"""``Worker``: claims tasks from its queues and runs them. Step it by hand (``process_next``), or run it
(the runtime composes the background services)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conveyor.model import Outcome, TaskRecord
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executor import Executor

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Worker"]

log = logging.getLogger("conveyor.worker")


class Worker:
    """A worker bound to an app. ``process_next()`` / ``run_until_idle()`` run tasks in this thread."""

    def __init__(self, app: Conveyor, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.executor = Executor(app, self.config)

    @property
    def queues(self) -> tuple[str, ...]:
        return self.config.queues

    def process_next(self) -> bool:
        """Run at most one runnable task now, in this thread. True if one was claimed."""
        claimed = self.app.broker.claim(list(self.config.queues), self.app.now(), self.config.lease_for, 1)
        if not claimed:
            return False
        self.settle(claimed[0], self.executor.run(claimed[0]))
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
