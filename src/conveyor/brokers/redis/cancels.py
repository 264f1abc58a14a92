"""Cancel announcements (``AnnouncesCancels``): ``cancel.lua`` PUBLISHes the id of each active task it
cancels on the namespace's ``cancels`` channel, and :class:`CancelWatch` listens there for
``watch_cancels`` (one thread and one pub/sub connection per broker object, from the first watcher on).

Only cancels of running tasks are published, so nothing else pays for it. Latency: one pub/sub hop.
Pub/sub is at-most-once: a cancel published while the listener reconnects is missed, and the worker
then learns of it at its next heartbeat instead (an announcement is only a shortcut).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from conveyor.brokers.base import announce_cancel

__all__ = ["CancelWatch"]

log = logging.getLogger("conveyor.brokers.redis.events")


class CancelWatch:
    """The watchers of one broker object, and the listener thread that tells them."""

    def __init__(self, client: redis.Redis, channel: str, ready_timeout: float) -> None:
        self._client = client
        self._channel = channel
        self._ready_timeout = ready_timeout
        self._lock = threading.Lock()
        self._watchers: list[Callable[[str], None]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        with self._lock:
            self._watchers.append(callback)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._listen, name="conveyor-redis-cancels", daemon=True)
                self._thread.start()
        if not self._ready.wait(self._ready_timeout):
            log.warning("cancel listener not subscribed yet; workers learn of cancels at their heartbeat meanwhile")

        def unwatch() -> None:
            with self._lock:
                if callback in self._watchers:
                    self._watchers.remove(callback)

        return unwatch

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5.0)

    def _listen(self) -> None:
        backoff = 0.05
        pubsub = None
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                    pubsub.subscribe(self._channel)
                    pubsub.get_message(timeout=self._ready_timeout)  # the subscribe confirmation
                    self._ready.set()
                message = pubsub.get_message(timeout=0.1)
                if message is not None and message.get("type") == "message":
                    with self._lock:
                        watchers = list(self._watchers)
                    announce_cancel(message["data"], watchers)
                backoff = 0.05
            except redis.RedisError as exc:
                log.warning("cancel listener lost its connection (%s); reconnecting in %.2fs", exc, backoff)
                _close_quietly(pubsub)
                pubsub = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        _close_quietly(pubsub)


def _close_quietly(pubsub: redis.client.PubSub | None) -> None:
    if pubsub is None:
        return
    try:
        pubsub.close()
    except Exception:
        log.debug("closing the pub/sub connection failed", exc_info=True)
