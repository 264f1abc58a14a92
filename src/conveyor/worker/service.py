"""The shape every background service of the runtime has: ``start()`` and ``stop()``.

``Periodic`` runs ``tick()`` at once and then every ``interval`` seconds on a daemon thread until
stopped; a raising tick is logged and the service goes on (a broker hiccup must not kill a worker),
backing off while the failures last. ``RetryDelay`` is the backoff every retrying service uses.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Protocol

from conveyor.errors import BrokerError

__all__ = ["Periodic", "RetryDelay", "Service", "log_failure"]

log = logging.getLogger("conveyor.worker")


class RetryDelay:
    """Capped exponential backoff with jitter: ``initial``, then doubling up to ``maximum`` seconds,
    each wait drawn from ``[delay/2, delay]`` so a fleet of workers does not reconnect in lockstep."""

    def __init__(self, initial: float = 0.1, maximum: float = 5.0) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        self.failures = 0
        self._rng = random.Random()

    def next(self) -> float:
        """The wait before the next try; each call counts one more failure."""
        delay = min(self.maximum, self.initial * 2 ** min(self.failures, 30))
        self.failures += 1
        return self._rng.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.failures = 0


def log_failure(what: str, exc: BaseException, delay: float) -> None:
    """A broker outage is one WARNING line per try (no traceback); anything else keeps its traceback."""
    if isinstance(exc, BrokerError):
        log.warning("%s failed (%s); retrying in %.2f s", what, exc, delay)
    else:
        log.error("%s failed; retrying in %.2f s", what, delay, exc_info=exc)


class Service(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class Periodic:
    """Calls ``tick()`` every ``interval`` seconds on its own thread."""

    name = "periodic"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"conveyor-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        retry = RetryDelay(self.interval, max(self.interval, 30.0))
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                delay = max(self.interval, retry.next())
                log_failure(self.name, exc, delay)
                self._stop.wait(delay)
                continue
            retry.reset()
            self._stop.wait(self.interval)
