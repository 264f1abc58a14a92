"""Event delivery: in-process subscribers at once, other processes' events by polling the ``events`` table.

While some broker object is subscribed (it holds a live row in ``listeners``), every write
transaction appends its events to ``events`` (id autoincrement, tagged with the writing broker's
``origin``); with no listener nothing is written. Events made by this broker object are delivered
synchronously right after the commit, in the calling thread, like the reference broker. Events made
by *other* broker objects (other processes, or another broker on the same file) are read by a daemon
thread, started by the first ``subscribe`` and stopped by ``close``, which polls ``WHERE id > last``
every ``poll_interval`` seconds (one indexed range read): their latency is about ``poll_interval``
(default 50 ms). A subscriber therefore receives every event exactly once, from whichever thread
delivers it. The table is trimmed to about ``events_kept`` rows; a poller further behind misses events.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

from conveyor.brokers.base import EventCallback, deliver
from conveyor.brokers.sqlite.db import Database
from conveyor.errors import BrokerError
from conveyor.model import Event

__all__ = ["EventHub"]

log = logging.getLogger("conveyor.brokers.sqlite")

_BATCH = 1000
#: A listener row stays live this long (wall-clock seconds) unless its poller refreshes it.
LISTENER_TTL = 60.0
_REFRESH_EVERY = 10.0


class EventHub:
    """Subscribers of one broker object, and the poller that feeds them other writers' events."""

    def __init__(self, db: Database, origin: str, poll_interval: float) -> None:
        self._db = db
        self._origin = origin
        self._interval = poll_interval
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._thread: threading.Thread | None = None
        self._stops: dict[threading.Thread, threading.Event] = {}
        self._last_id = 0

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)
            if self._thread is None:
                self._last_id = self._db.write(self._register)
                stop = threading.Event()  # each poller its own: one stopped ends for good
                self._thread = threading.Thread(
                    target=self._poll, args=(stop,), name="conveyor-sqlite-events", daemon=True
                )
                self._stops[self._thread] = stop
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
                if self._subscribers:
                    return
                # no one left to tell: stop polling, and writers stop keeping events for this one
                thread, self._thread = self._thread, None
            self._end(thread)

        return unsubscribe

    @property
    def active(self) -> bool:
        return bool(self._subscribers)

    def deliver(self, events: Sequence[Event]) -> None:
        """Hand ``events`` to every subscriber; a raising subscriber is logged and skipped."""
        if not events or not self._subscribers:
            return
        with self._lock:
            subscribers = list(self._subscribers)
        deliver(events, subscribers)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        self._end(thread)

    def _end(self, thread: threading.Thread | None) -> None:
        """Stop ``thread`` (the poller taken out of ``_thread``), then unregister this listener unless
        a subscribe started another meanwhile."""
        if thread is None:
            return
        with self._lock:
            stop = self._stops.pop(thread)
        stop.set()
        if thread is not threading.current_thread():  # a callback unsubscribing ends its own poller
            thread.join()
        with self._lock:
            if self._thread is not None:
                return
        try:
            self._db.write(lambda conn: conn.execute("DELETE FROM listeners WHERE origin = ?", (self._origin,)))
        except BrokerError:  # the row expires on its own
            log.debug("unregistering listener on %s failed", self._db.path, exc_info=True)

    def _register(self, conn: sqlite3.Connection) -> int:
        """Mark this broker as listening and return the last event id, in one transaction."""
        conn.execute(
            "INSERT OR REPLACE INTO listeners (origin, until) VALUES (?, ?)",
            (self._origin, time.time() + LISTENER_TTL),
        )
        return int(conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0])

    def _poll(self, stop: threading.Event) -> None:
        refreshed = time.monotonic()
        while not stop.wait(self._interval):
            try:
                if time.monotonic() - refreshed >= _REFRESH_EVERY:
                    self._db.write(self._register)
                    refreshed = time.monotonic()
                while self._poll_once() == _BATCH and not stop.is_set():
                    pass
            except BrokerError:
                log.warning("reading events from %s failed; retrying", self._db.path, exc_info=True)

    def _poll_once(self) -> int:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT id, origin, task_id, old_state, new_state, queue, at FROM events"
                " WHERE id > ? ORDER BY id LIMIT ?",
                (self._last_id, _BATCH),
            ).fetchall()
        )
        if rows:
            self._last_id = rows[-1][0]
            self.deliver([Event(r[2], r[3], r[4], r[5], r[6]) for r in rows if r[1] != self._origin])
        return len(rows)
