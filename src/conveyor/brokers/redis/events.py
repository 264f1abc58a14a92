"""Event delivery: local subscribers at once, other processes' events through Redis pub/sub.

Scripts SPUBLISH every transition they make on the shard channel of the queue slot they ran in,
tagged with the calling broker object's origin id. The caller delivers its own events synchronously
(from the script's reply, so a subscriber sees them before the call returns, as with ``memory://``);
a listener thread, started with the first subscriber, delivers everyone else's. Latency for other
processes: one pub/sub hop (well under a millisecond on a LAN). Pub/sub is at-most-once: events
published while a listener is disconnected are not replayed (the listener reconnects with backoff).

Scripts make events only when someone wants them: the caller has local subscribers (ARGV), or their
queue slot's ``listening`` key exists. Each listener sets that key in every slot it subscribed to
(with a TTL of :data:`LISTENING_TTL` seconds) before it reports itself ready and refreshes it every
:data:`LISTENING_REFRESH` seconds, so a namespace nobody listens to pays nothing for events. With a
slot per queue, a queue registered after the listener started makes events (and is heard) from the
listener's next refresh on, at most :data:`LISTENING_REFRESH` seconds later (``listener.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import redis

from conveyor.brokers.base import EventCallback, deliver
from conveyor.brokers.redis.codec import decode_events
from conveyor.brokers.redis.keys import Slot
from conveyor.brokers.redis.listener import REFRESH, Listener
from conveyor.model import Event

__all__ = ["LISTENING_REFRESH", "LISTENING_TTL", "EventHub"]

log = logging.getLogger("conveyor.brokers.redis.events")

#: Lifetime of the ``listening`` key (seconds) and how often a live listener renews it.
LISTENING_TTL = 10.0
LISTENING_REFRESH = REFRESH


class EventHub:
    """Subscribers of one broker object, and the listener thread that feeds them."""

    def __init__(
        self,
        client: Callable[[], redis.Redis],
        slots: Callable[[], Sequence[Slot]],
        origin: str,
        ready_timeout: float,
    ) -> None:
        """``slots()``: the queue slots to listen to (see ``Listener``)."""
        self._client = client
        self._origin = origin
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._held = threading.local()  # events: what this thread's delivery holds back (``held``)
        self.listener = Listener(
            client,
            slots,
            lambda slot: slot.events,
            ready_timeout,
            self._on_message,
            what="events",
            tick=self._keep_listening,
        )

    @property
    def active(self) -> bool:
        """True when someone listens here (scripts then return events for local delivery)."""
        return bool(self._subscribers)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)
        if not self.listener.start():
            log.warning("event listener not subscribed yet; other processes' events may be missed meanwhile")

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def deliver(self, events: list[Event]) -> None:
        """Call every subscriber with every event; a raising subscriber is logged and skipped."""
        held: list[Event] | None = getattr(self._held, "events", None)
        if held is not None:
            held += events
            return
        with self._lock:
            subscribers = list(self._subscribers)
        deliver(events, subscribers)

    @contextmanager
    def held(self, order: Callable[[Event], int]) -> Iterator[None]:
        """Hold what this thread delivers until the block ends, then deliver it sorted by ``order``
        (stably): a call made of several script calls tells its events in the order of its tasks."""
        if not self._subscribers:
            yield
            return
        held: list[Event] = []
        self._held.events = held
        try:
            yield
        finally:
            self._held.events = None
            self.deliver(sorted(held, key=order))

    def close(self) -> None:
        self.listener.close()

    def _keep_listening(self, slots: Sequence[Slot]) -> None:
        """Set the ``listening`` key of every slot listened to (the listener calls this on connecting,
        then every :data:`LISTENING_REFRESH` seconds): one command for layout 4's one slot, else one
        pipeline (on a cluster, redis-py's sends each node its slots' keys)."""
        ttl = int(LISTENING_TTL * 1000)
        if len(slots) == 1:
            self._client().set(slots[0].listening, self._origin, px=ttl)
            return
        pipe = self._client().pipeline(transaction=False)
        for slot in slots:
            pipe.set(slot.listening, self._origin, px=ttl)
        pipe.execute()

    def _on_message(self, data: str) -> None:
        origin, at, blob = data.split("\n", 2)
        if origin != self._origin:
            self.deliver(decode_events(blob, float(at)))
