"""Backoff policies: pure functions of (failure count, rng).

``delay(n, rng)`` is the wait after the n-th failure (n >= 1): ``Exponential`` waits ``initial`` after
the first, ``initial * factor`` after the second, ``initial * factor**2`` after the third, capped at
``max``; with ``jitter`` the wait is drawn uniformly from ``[0, that]`` ("full jitter") using the
caller's RNG, so tests seed it.

A policy given at enqueue travels with the task as JSON (``to_dict``, whose ``"kind"`` names the class)
and the worker rebuilds it (``backoff_from_dict``). So a custom policy must be registered under its kind
(``@register_backoff("linear")``) in every process that enqueues or runs it; an unregistered one is
refused at enqueue (``UnknownBackoff``) rather than failing later in a worker.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from conveyor._validate import check_positive, check_seconds
from conveyor.errors import ConfigurationError, SerializationError, UnknownBackoff
from conveyor.serializers import decode, encode

__all__ = ["Backoff", "Exponential", "Fixed", "backoff_from_dict", "register_backoff"]

B = TypeVar("B", bound=type)

#: A kind names a policy in stored options: short, printable, no whitespace.
_KIND = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


@runtime_checkable
class Backoff(Protocol):
    """Anything that says how long to wait after the n-th failure."""

    def delay(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait after the ``failures``-th failure (``rng`` for jitter)."""

    def to_dict(self) -> dict[str, Any]:
        """The policy as stored with a task: JSON values, ``"kind"`` naming it (``register_backoff``)."""


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
        """Seconds to wait after the ``failures``-th failure: the formula above, uniform in ``[0, it]`` with jitter."""
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
        """The policy as stored with a task (``{"kind": "exponential", ...}``)."""
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
        """``seconds``, whatever the failure."""
        return float(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """The policy as stored with a task (``{"kind": "fixed", "seconds": ...}``)."""
        return {"kind": "fixed", "seconds": self.seconds}


#: Policy classes by the kind their ``to_dict()`` names; the built-in kinds are taken.
_KINDS: dict[str, type] = {"exponential": Exponential, "fixed": Fixed}


def register_backoff(kind: str) -> Callable[[B], B]:
    """Class decorator: register a custom ``Backoff`` policy under ``kind`` so it can travel with a task.

    The class's ``to_dict()`` must return ``{"kind": kind, ...}`` with JSON values, and the class must be
    rebuildable from that dict: by its ``from_dict(params)`` classmethod if it has one, else by
    ``cls(**params)`` (params: the dict without ``"kind"``), as a dataclass is. Register it in a module
    that every producer and worker imports (the app's module). Registering the same class again is a
    no-op; another class under a taken kind is a ``ConfigurationError``.
    """
    if not isinstance(kind, str):
        raise TypeError(f"backoff kind must be a str, not {type(kind).__name__}")
    if not _KIND.fullmatch(kind):
        raise ValueError(f"backoff kind must be 1-64 letters, digits or _.:-, not {kind!r}")

    def register(cls: B) -> B:
        if not isinstance(cls, type) or not callable(getattr(cls, "delay", None)):
            raise TypeError(f"@register_backoff({kind!r}) decorates a Backoff class, not {cls!r}")
        taken = _KINDS.get(kind)
        if taken is not None and _qualname(taken) != _qualname(cls):
            raise ConfigurationError(f"backoff kind {kind!r} is already registered to {_qualname(taken)}")
        _KINDS[kind] = cls  # the same class again (a module reloaded): the newest object wins
        return cls

    return register


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def backoff_from_dict(data: Any) -> Backoff:
    """Rebuild a policy from ``to_dict()`` output.

    ``UnknownBackoff`` if no class is registered under its kind in this process; ValueError/TypeError
    if the dict is not one its class accepts.
    """
    if not isinstance(data, dict):
        raise TypeError(f"a stored backoff must be a JSON object, not {type(data).__name__}")
    kind = data.get("kind")
    if kind == "exponential":
        return Exponential(initial=data["initial"], factor=data["factor"], max=data["max"], jitter=data["jitter"])
    if kind == "fixed":
        return Fixed(seconds=data["seconds"])
    if not isinstance(kind, str):
        raise ValueError(f"a stored backoff names no kind: {data!r}")
    cls = _registered(kind, f"no backoff policy is registered under kind {kind!r} in this process", "this process")
    params = {key: value for key, value in data.items() if key != "kind"}
    from_dict = getattr(cls, "from_dict", None)
    try:
        policy = from_dict(params) if callable(from_dict) else cls(**params)
    except Exception as exc:  # a user's class may raise anything on values it refuses
        raise ValueError(f"backoff {kind!r} cannot be rebuilt from {params!r}: {exc}") from exc
    if not isinstance(policy, Backoff):
        raise TypeError(f"backoff {kind!r} rebuilt as {policy!r}, which is not a Backoff")
    return policy


def _registered(kind: str, problem: str, importer: str) -> type:
    """The class registered under ``kind``; else ``UnknownBackoff`` saying ``problem`` and the fix."""
    cls = _KINDS.get(kind)
    if cls is None:
        raise UnknownBackoff(
            f"{problem}; decorate its class with @register_backoff({kind!r}) in a module {importer} imports"
        )
    return cls


def check_backoff(value: object) -> Backoff:
    """A policy fit for ``@app.task``: it stays in this process, so any ``Backoff`` will do."""
    if not isinstance(value, Backoff):
        raise TypeError(f"backoff must be a Backoff policy such as Exponential(...) or Fixed(...), not {value!r}")
    return value


def check_travelling_backoff(value: object) -> Backoff:
    """A policy fit to travel with a task: registered under its kind, and rebuilt equal from its JSON.

    Checked at enqueue, so a policy a worker could not rebuild fails at the call that gave it.
    """
    policy = check_backoff(value)
    if type(policy) in (Exponential, Fixed):  # checked by their constructors; rebuilt field for field
        return policy
    data = policy.to_dict()
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str):
        raise TypeError(f"{type(policy).__name__}.to_dict() must return a dict with a str 'kind', not {data!r}")
    cls = _registered(
        kind,
        f"backoff {type(policy).__name__} (kind {kind!r}) is not registered, so a worker could not rebuild it",
        "every producer and worker",
    )
    if not isinstance(policy, cls):
        raise ConfigurationError(
            f"backoff kind {kind!r} is registered to {_qualname(cls)}, not {_qualname(type(policy))}"
        )
    stored = decode(encode(data, "backoff"))
    rebuilt = backoff_from_dict(stored)
    # Equality is not required of a user's class; the same dict and the same first waits (same seed) are.
    same_waits = all(policy.delay(n, random.Random(n)) == rebuilt.delay(n, random.Random(n)) for n in range(1, 9))
    if not same_waits or decode(encode(rebuilt.to_dict(), "backoff")) != stored:
        raise SerializationError(f"backoff {policy!r} does not survive its JSON form: rebuilt as {rebuilt!r}")
    return policy
