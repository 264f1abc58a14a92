"""Event delivery: local subscribers at once, other processes' events through Redis pub/sub.

Scripts PUBLISH every transition they make on the namespace's channel, tagged with the calling broker
object's origin id. The caller delivers its own events synchronously (from the script's reply, so a
subscriber sees them before the call returns, as with ``memory://``); a listener thread, started with
the first subscriber, delivers everyone else's. Latency for other processes: one pub/sub hop (well
under a millisecond on a LAN). Pub/sub is at-most-once: events published while a listener is
disconnected are not replayed (the listener reconnects with backoff).

Scripts make events only when someone wants them: the caller has local subscribers (ARGV), or the
namespace's ``listening`` key exists. Each listener sets that key (with a TTL of
:data:`LISTENING_TTL` seconds) before it reports itself ready and refreshes it every
:data:`LISTENING_REFRESH` seconds, so a namespace nobody listens to pays nothing for events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from conveyor.brokers.base import EventCallback, deliver
from conveyor.brokers.redis.codec import decode_events
from conveyor.model import Event

__all__ = ["LISTENING_REFRESH", "LISTENING_TTL", "EventHub"]

log = logging.getLogger("conveyor.brokers.redis.events")

#: Lifetime of the ``listening`` key (seconds) and how often a live listener renews it.
LISTENING_TTL = 10.0
LISTENING_REFRESH = 2.0


class EventHub:
    """Subscribers of one broker object, and the listener thread that feeds them."""

    def __init__(self, client: redis.Redis, channel: str, listening: str, origin: str, ready_timeout: float) -> None:
        self._client = client
        self._channel = channel
        self._listening = listening
        self._origin = origin
        self._ready_timeout = ready_timeout
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    @property
    def active(self) -> bool:
        """True when someone listens here (scripts then return events for local delivery)."""
        return bool(self._subscribers)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._listen, name="conveyor-redis-events", daemon=True)
                self._thread.start()
        if not self._ready.wait(self._ready_timeout):
            log.warning("event listener not subscribed yet; other processes' events may be missed meanwhile")

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def deliver(self, events: list[Event]) -> None:
        """Call every subscriber with every event; a raising subscriber is logged and skipped."""
        with self._lock:
            subscribers = list(self._subscribers)
        deliver(events, subscribers)

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5.0)

    def _listen(self) -> None:
        backoff = 0.05
        pubsub = None
        renew_at = 0.0
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                    pubsub.subscribe(self._channel)
                    pubsub.get_message(timeout=self._ready_timeout)  # the subscribe confirmation
                    renew_at = 0.0
                if time.monotonic() >= renew_at:
                    self._client.set(self._listening, self._origin, px=int(LISTENING_TTL * 1000))
                    renew_at = time.monotonic() + LISTENING_REFRESH
                    self._ready.set()
                message = pubsub.get_message(timeout=0.1)
                if message is not None and message.get("type") == "message":
                    self._on_message(message["data"])
                backoff = 0.05
            except redis.RedisError as exc:
                log.warning("event listener lost its connection (%s); reconnecting in %.2fs", exc, backoff)
                if pubsub is not None:
                    _close_quietly(pubsub)
                pubsub = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                log.exception("event listener failed on a message; going on")
        if pubsub is not None:
            _close_quietly(pubsub)

    def _on_message(self, data: str) -> None:
        origin, at, blob = data.split("\n", 2)
        if origin != self._origin:
            self.deliver(decode_events(blob, float(at)))


def _close_quietly(pubsub: redis.client.PubSub) -> None:
    try:
        pubsub.close()
    except Exception:
        log.debug("closing the pub/sub connection failed", exc_info=True)
