"""Cancel announcements (``AnnouncesCancels``): ``cancel.lua`` SPUBLISHes the id of each active task it
cancels on the ``cancels`` channel of the task's queue slot, and :class:`CancelWatch` listens on every
queue slot's for ``watch_cancels`` (one thread per broker object, from the first watcher on, with one
pub/sub connection per node serving a listened slot; ``listener.py``).

Only cancels of running tasks are published, so nothing else pays for it. Latency: one pub/sub hop.
Pub/sub is at-most-once: a cancel published while the listener reconnects is missed, and the worker
then learns of it at its next heartbeat instead (an announcement is only a shortcut).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import redis

from conveyor.brokers.base import announce_cancel
from conveyor.brokers.redis.keys import Slot
from conveyor.brokers.redis.listener import Listener

__all__ = ["CancelWatch"]

log = logging.getLogger("conveyor.brokers.redis.cancels")


class CancelWatch:
    """The watchers of one broker object, and the listener thread that tells them."""

    def __init__(
        self, client: Callable[[], redis.Redis], slots: Callable[[], Sequence[Slot]], ready_timeout: float
    ) -> None:
        """``slots()``: the queue slots to listen to (see ``Listener``)."""
        self._lock = threading.Lock()
        self._watchers: list[Callable[[str], None]] = []
        self.listener = Listener(
            client, slots, lambda slot: slot.cancels, ready_timeout, self._on_message, what="cancels"
        )

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        with self._lock:
            self._watchers.append(callback)
        if not self.listener.start():
            log.warning("cancel listener not subscribed yet; workers learn of cancels at their heartbeat meanwhile")

        def unwatch() -> None:
            with self._lock:
                if callback in self._watchers:
                    self._watchers.remove(callback)

        return unwatch

    def close(self) -> None:
        self.listener.close()

    def _on_message(self, task_id: str) -> None:
        with self._lock:
            watchers = list(self._watchers)
        announce_cancel(task_id, watchers)
