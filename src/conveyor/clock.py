"""Time sources. Every time-sensitive call takes ``now`` from one of these; nothing patches time.

A clock is any zero-argument callable returning epoch seconds as a float. ``SystemClock`` reads the
wall clock; ``FakeClock`` only moves when told to, so tests drive delays, retries, leases and cron
deterministically.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["PRESENT_SLACK", "Clock", "FakeClock", "SystemClock", "check_clock", "is_present"]

Clock = Callable[[], float]

#: A ``now`` within this many seconds of a real clock's reading is the present (the slack covers a
#: thread paused between reading its clock and using the time).
PRESENT_SLACK = 1.0


def is_present(now: float, present: Clock = time.time) -> bool:
    """``now`` is the present by ``present`` (a FakeClock's time is not: it does not pass with real
    time, so a due time by it must not become a real deadline)."""
    return abs(now - present()) <= PRESENT_SLACK


class SystemClock:
    """The wall clock (``time.time()``)."""

    def now(self) -> float:
        """Seconds since the epoch, now."""
        return time.time()

    def __call__(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that moves only when told to: ``advance(seconds)`` or ``set(t)``. Thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = _finite("start", start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The clock's time: where ``advance`` and ``set`` left it."""
        with self._lock:
            return self._now

    def __call__(self) -> float:
        return self.now()

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0); returns the new time."""
        step = _finite("seconds", seconds)
        if step < 0:
            raise ValueError(f"a FakeClock cannot go backwards (advance({seconds!r}))")
        with self._lock:
            self._now += step
            return self._now

    def set(self, t: float) -> None:
        """Jump to ``t`` (any finite time; tests may move backwards to model clock skew)."""
        value = _finite("t", t)
        with self._lock:
            self._now = value

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"


def _finite(what: str, value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return float(value)


def check_clock(clock: object) -> Clock:
    """Return ``clock`` if it is a usable clock, else raise TypeError."""
    if clock is None:
        return SystemClock()
    if not callable(clock):
        raise TypeError(f"clock must be a zero-argument callable returning epoch seconds, not {clock!r}")
    return clock
