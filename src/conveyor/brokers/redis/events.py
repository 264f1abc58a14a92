"""Event delivery: local subscribers at once, other processes' events through Redis pub/sub.

Scripts SPUBLISH every transition they make on the namespace's shard channel, tagged with the calling broker
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
from conveyor.brokers.redis.listener import Listener
from conveyor.model import Event

__all__ = ["LISTENING_REFRESH", "LISTENING_TTL", "EventHub"]

log = logging.getLogger("conveyor.brokers.redis.events")

#: Lifetime of the ``listening`` key (seconds) and how often a live listener renews it.
LISTENING_TTL = 10.0
LISTENING_REFRESH = 2.0


class EventHub:
    """Subscribers of one broker object, and the listener thread that feeds them."""

    def __init__(
        self, client: Callable[[], redis.Redis], channel: str, listening: str, origin: str, ready_timeout: float
    ) -> None:
        self._client = client
        self._listening = listening
        self._origin = origin
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._renew_at = 0.0
        self._listener = Listener(
            client, channel, ready_timeout, self._on_message, what="events", tick=self._keep_listening
        )

    @property
    def active(self) -> bool:
        """True when someone listens here (scripts then return events for local delivery)."""
        return bool(self._subscribers)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)
        if not self._listener.start():
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
        self._listener.close()

    def _keep_listening(self, subscribed: bool) -> None:
        """Set the ``listening`` key on (re)connecting, then every :data:`LISTENING_REFRESH` seconds."""
        if subscribed or time.monotonic() >= self._renew_at:
            self._client().set(self._listening, self._origin, px=int(LISTENING_TTL * 1000))
            self._renew_at = time.monotonic() + LISTENING_REFRESH

    def _on_message(self, data: str) -> None:
        origin, at, blob = data.split("\n", 2)
        if origin != self._origin:
            self.deliver(decode_events(blob, float(at)))
