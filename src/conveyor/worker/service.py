"""The shape every background service of the runtime has: ``start()`` and ``stop()``.

``Periodic`` runs ``tick()`` at once and then every ``interval`` seconds on a daemon thread until
stopped; a raising tick is logged and the service goes on (a broker hiccup must not kill a worker).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

__all__ = ["Periodic", "Service"]

log = logging.getLogger("conveyor.worker")


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
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("%s: tick failed; retrying in %.1f s", self.name, self.interval)
            self._stop.wait(self.interval)
