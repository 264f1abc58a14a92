"""Cancel watcher: stops a cancelled task's handler as soon as the broker announces the cancel.

``Broker.cancel`` archives a running task and revokes its lease; the heartbeat finds that out at its
next extend (within 1.5 heartbeat intervals, since it skips leases renewed less than half an interval
ago). A broker that ``AnnouncesCancels`` (Redis: pub/sub; memory: in process) lets the worker holding
the task act at once instead: the announcement is confirmed by renewing that one lease now
(``Heartbeat.renew``), and its loss is handled exactly as the heartbeat handles it. A task still in the
buffer (claimed, not started) is then dropped and never starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor.brokers.base import AnnouncesCancels
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.inflight import Inflight

if TYPE_CHECKING:
    from conveyor.host import Host

__all__ = ["CancelWatcher"]


class CancelWatcher:
    name = "cancels"

    def __init__(self, app: Host, inflight: Inflight, heartbeat: Heartbeat) -> None:
        self.app = app
        self.inflight = inflight
        self.heartbeat = heartbeat
        self._unwatch: Callable[[], None] | None = None

    def start(self) -> None:
        broker = self.app.broker
        if isinstance(broker, AnnouncesCancels):
            self._unwatch = broker.watch_cancels(self._cancelled)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _cancelled(self, task_id: str) -> None:
        held = self.inflight.get(task_id)
        if held is not None and not held.lost and not held.finished:
            self.heartbeat.renew(held)
