"""Backoff policies: pure functions of (failure count, rng).

``delay(n, rng)`` is the wait after the n-th failure (n >= 1): ``Exponential`` waits ``initial`` after
the first, ``initial * factor`` after the second, ``initial * factor**2`` after the third, capped at
``max``; with ``jitter`` the wait is drawn uniformly from ``[0, that]`` ("full jitter") using the
caller's RNG, so tests seed it. Policies travel with a task as JSON (``to_dict``/``backoff_from_dict``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from conveyor._validate import check_positive, check_seconds

__all__ = ["Backoff", "Exponential", "Fixed", "backoff_from_dict"]


@runtime_checkable
class Backoff(Protocol):
    """Anything that says how long to wait after the n-th failure."""

    def delay(self, failures: int, rng: random.Random) -> float: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Exponential:
    """``initial * factor**(n-1)`` seconds after the n-th failure, capped at ``max`` (None: no cap)."""

    initial: float = 1.0
    factor: float = 2.0
    max: float | None = 3600.0
    jitter: bool = False

    def __post_init__(self) -> None:
        check_seconds("initial", self.initial)
        check_positive("factor", self.factor)
        check_seconds("max", self.max, allow_none=True)
        if not isinstance(self.jitter, bool):
            raise TypeError(f"jitter must be a bool, not {type(self.jitter).__name__}")

    def delay(self, failures: int, rng: random.Random) -> float:
        exponent = max(0, failures - 1)
        try:
            wait = self.initial * self.factor**exponent
        except OverflowError:
            wait = float("inf")
        if self.max is not None:
            wait = min(wait, self.max)
        if wait == float("inf"):
            wait = 10 * 365 * 24 * 3600.0  # no cap asked for: ten years is "never" for a queue
        return rng.uniform(0.0, wait) if self.jitter else wait

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "exponential",
            "initial": self.initial,
            "factor": self.factor,
            "max": self.max,
            "jitter": self.jitter,
        }


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same wait after every failure."""

    seconds: float = 1.0

    def __post_init__(self) -> None:
        check_seconds("seconds", self.seconds)

    def delay(self, failures: int, rng: random.Random) -> float:
        return float(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "fixed", "seconds": self.seconds}


def backoff_from_dict(data: dict[str, Any]) -> Backoff:
    """Rebuild a policy from ``to_dict()`` output."""
    kind = data.get("kind")
    if kind == "exponential":
        return Exponential(initial=data["initial"], factor=data["factor"], max=data["max"], jitter=data["jitter"])
    if kind == "fixed":
        return Fixed(seconds=data["seconds"])
    raise ValueError(f"unknown backoff kind {kind!r}")


def check_backoff(value: object) -> Backoff:
    if not isinstance(value, Backoff):
        raise TypeError(f"backoff must be a Backoff policy such as Exponential(...) or Fixed(...), not {value!r}")
    return value
