"""A clock that agrees with the Redis server: ``time.time()`` plus the offset to the server's TIME.

Workers on hosts whose clocks disagree would otherwise see leases and due times differently. The
offset is measured (TIME, midpoint of the round trip) when the clock is made and again every
``refresh`` seconds, inline in a call (one round trip per refresh; if the server cannot be reached the
last offset is kept and another try is made 5 s later). The app uses ``RedisBroker.server_clock()``
when the user injected no clock; tests inject a FakeClock instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisClusterException

__all__ = ["ServerClock"]

log = logging.getLogger("conveyor.brokers.redis.clock")


class ServerClock:
    """Callable returning the server's idea of now, in epoch seconds."""

    def __init__(self, client: Callable[[], redis.Redis], refresh: float = 60.0) -> None:
        """``client()``: the client to ask, at each measurement (a broker's may change once it knows
        the server is a cluster node: then a node that answers, not the URL's first)."""
        self._client = client
        self._refresh = refresh
        self._lock = threading.Lock()
        self.offset = 0.0
        self._next_sync = 0.0
        self.sync(first=True)

    def sync(self, first: bool = False) -> float:
        """Measure the offset now; returns it (the previous one is kept if the server is unreachable).

        A failure of the ``first`` measurement is logged at DEBUG only: the caller's first command meets
        the same unreachable server and raises ``BrokerUnavailable``, which says it in one line."""
        try:
            before = time.time()
            seconds, micros = self._client().time()
            after = time.time()
        except (redis.RedisError, RedisClusterException) as exc:
            level = logging.DEBUG if first else logging.WARNING
            log.log(level, "could not read the server clock (%s); keeping offset %.6fs", exc, self.offset)
            self._next_sync = time.monotonic() + 5.0
            return self.offset
        self.offset = seconds + micros / 1e6 - (before + after) / 2
        self._next_sync = time.monotonic() + self._refresh
        return self.offset

    def __call__(self) -> float:
        if time.monotonic() >= self._next_sync and self._lock.acquire(blocking=False):
            try:
                self.sync()
            finally:
                self._lock.release()
        return time.time() + self.offset

    def now(self) -> float:
        return self()
