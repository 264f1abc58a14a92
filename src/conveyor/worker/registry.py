"""Registry heartbeat: advertises this worker (``Broker.register_worker``) so dashboards list it.

Its first beat also publishes the declarations of the app's tasks (``conveyor.declared``), so a process
that enqueues one by name without its handler puts it in the queue this worker serves.

The record lives ``3 * interval`` seconds past each beat, so a dead worker disappears on its own; a
clean exit unregisters at once. Its first beat also runs the broker's ``preflight()`` when it has one
(``ChecksServer``) and logs each finding that is not ok, so a worker on a server that may drop tasks says
so in its log as it starts.

Each beat also reads the operator's command for this worker (``CommandsWorkers``, ``conveyor.commands``)
and passes a new one to ``obey`` once: a worker obeys ``quiet`` or ``stop`` within one beat.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor.brokers.base import ChecksServer, CommandsWorkers
from conveyor.declared import declarations_of
from conveyor.model import WorkerInfo
from conveyor.worker.config import WorkerConfig
from conveyor.worker.service import Periodic

if TYPE_CHECKING:
    from conveyor.host import Host

__all__ = ["Registry", "new_worker_id"]

log = logging.getLogger("conveyor.worker")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Registry(Periodic):
    name = "registry"

    def __init__(
        self,
        app: Host,
        config: WorkerConfig,
        worker_id: str,
        running: Callable[[], tuple[str, ...]],
        counts: Callable[[], tuple[int, int]],
        obey: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(config.registry_interval)
        self.app = app
        self.config = config
        self.worker_id = worker_id
        self.running = running
        self.counts = counts
        self.started_at = app.now()
        self.obey = obey
        self.obeyed: str | None = None  # the last command obeyed (set once its effect holds)
        self._checked = False
        self._declared = False

    def tick(self) -> None:
        if not self._checked:
            self._checked = True
            broker = self.app.broker
            if isinstance(broker, ChecksServer):
                for finding in broker.preflight():
                    if not finding.ok:
                        log.warning("preflight: %s: %s", finding.name, finding.detail)
        if not self._declared:  # again at the next beat if the broker was down
            self.app.declared.publish(declarations_of(self.app.registry, self.app.now()))
            self._declared = True
        processed, failed = self.counts()
        info = WorkerInfo(
            id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.config.queues,
            concurrency=self.config.concurrency,
            started_at=self.started_at,
            running=self.running(),
            processed=processed,
            failed=failed,
        )
        self.app.broker.register_worker(info, self.app.now(), 3 * self.interval)
        broker = self.app.broker
        if self.obey is not None and isinstance(broker, CommandsWorkers):
            command = broker.worker_command(self.worker_id, self.app.now())
            if command is not None and command != self.obeyed:
                try:
                    self.obey(command)
                finally:  # set once obeyed: a quiet fetcher has stopped claiming by then
                    self.obeyed = command

    def stop(self) -> None:
        super().stop()
        try:
            self.app.broker.unregister_worker(self.worker_id)
        except Exception:  # the broker may be gone at exit: the record expires on its own
            pass
