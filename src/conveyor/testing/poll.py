"""``poll_until``: wait in a test for something another thread or process does, with a deadline.

A test must never sleep a fixed time to let work happen (too short fails on a busy machine, too long
wastes every run). It polls a predicate instead, and fails with a message naming what it waited for
when the deadline passes, so a hang becomes a clear assertion failure instead of a timeout of the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

from conveyor.errors import ConfigurationError

__all__ = ["poll_until"]

T = TypeVar("T")


def poll_until(
    predicate: Callable[[], T | None],
    *,
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | Callable[[], str] = "the condition",
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value, and return that value
    (a predicate typed to return ``X | None`` gives an ``X``).

    Raises ``AssertionError`` once ``timeout`` seconds passed without one: "timed out after 5.0 s waiting
    for <message>". ``message`` says what was awaited; give a function to describe the state at the
    timeout (called once, then). An exception from ``predicate`` propagates at once. The predicate is
    always called at least once, and once more at the deadline, so a slow interval never costs a result.
    """
    if not (_seconds(timeout) and timeout >= 0):
        raise ConfigurationError(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    if not (_seconds(interval) and interval > 0):
        raise ConfigurationError(f"interval must be a finite number of seconds > 0, not {interval!r}")
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(interval, left))
    what = message() if callable(message) else message
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _seconds(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
