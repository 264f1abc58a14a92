"""Task options: their defaults, their checks, and how they are resolved when a task runs.

Options given explicitly at enqueue travel with the task (as JSON in ``TaskRecord.options``); every
other option is taken, when the task runs, from the worker's registration of that task name, then
from the library defaults. So producer-only code that enqueues by name gets the retry policy the
worker declares.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from conveyor._validate import (
    check_expires,
    check_int,
    check_positive,
    check_priority,
    check_queue,
    check_retry_on,
    check_seconds,
    check_task_id,
)
from conveyor.errors import SerializationError, UnknownBackoff
from conveyor.names import did_you_mean
from conveyor.retry import Backoff, Exponential, backoff_from_dict, check_backoff, check_travelling_backoff
from conveyor.serializers import decode

__all__ = [
    "ENQUEUE_OPTIONS",
    "TRAVELLING",
    "EffectiveOptions",
    "TaskOptions",
    "check_enqueue_options",
    "malformed_call",
    "registered_options",
]

#: Options that, given at enqueue, are stored with the task and win over the worker's registration.
TRAVELLING = ("max_retries", "backoff", "retry_on", "timeout", "retention")

#: Every keyword ``with_options()`` and ``app.enqueue`` accept.
ENQUEUE_OPTIONS = frozenset(
    {
        "queue",
        "task_id",
        "delay",
        "eta",
        "priority",
        "max_retries",
        "backoff",
        "retry_on",
        "timeout",
        "expires",
        "retention",
        "unique_for",
        "unique_key",
    }
)


@dataclass(frozen=True)
class TaskOptions:
    """A task's registered options (the defaults of ``@app.task``)."""

    queue: str = "default"
    max_retries: int = 3
    backoff: Backoff = field(default_factory=Exponential)
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout: float | None = None
    priority: int = 0
    retention: float = 3600.0
    expires: float | datetime | None = None
    unique_for: float | None = None

    def __post_init__(self) -> None:
        check_queue(self.queue)
        check_int("max_retries", self.max_retries)
        check_backoff(self.backoff)
        check_retry_on(self.retry_on)
        check_timeout(self.timeout)
        check_priority(self.priority)
        check_seconds("retention", self.retention)
        check_seconds("unique_for", self.unique_for, allow_none=True)
        if self.expires is not None:
            check_expires(self.expires, 0.0)  # seconds no date could end, or a naive datetime: refused


def check_timeout(value: object) -> float | None:
    """A task's timeout: seconds > 0, or None for none. 0 is refused: several queues read it as "no
    limit", where here it would fail every run."""
    try:
        return check_positive("timeout", value, allow_none=True)
    except ValueError:
        raise ValueError(f"timeout must be finite and > 0 seconds (None: no timeout), got {value!r}") from None


#: Every keyword ``@app.task`` takes besides ``name``.
_REGISTERED = frozenset(f.name for f in fields(TaskOptions))

_CHECKS: dict[str, Callable[[Any], object]] = {
    "queue": check_queue,
    "task_id": check_task_id,
    "delay": lambda v: check_seconds("delay", v),
    "priority": check_priority,
    "max_retries": lambda v: check_int("max_retries", v),
    "backoff": check_travelling_backoff,
    "retry_on": check_retry_on,
    "timeout": check_timeout,
    "expires": lambda v: check_expires(v, 0.0),
    "retention": lambda v: check_seconds("retention", v),
    "unique_for": lambda v: check_seconds("unique_for", v, allow_none=True),  # None: lifts the task's own
}


def registered_options(options: dict[str, Any]) -> TaskOptions:
    """``@app.task``'s options as :class:`TaskOptions`; one it does not take is named (those only an
    enqueue takes as such), not left to the dataclass's "unexpected keyword argument"."""
    unknown = sorted(set(options) - _REGISTERED)
    if unknown:
        per_call = [name for name in unknown if name in ENQUEUE_OPTIONS]
        hint = (
            f" ({', '.join(per_call)}: an option of each enqueue, with_options(...) or app.enqueue)" if per_call else ""
        )
        hint += "".join(did_you_mean(name, _REGISTERED) for name in unknown if name not in ENQUEUE_OPTIONS)
        raise TypeError(f"unknown task option(s) for @app.task: {', '.join(unknown)}{hint}")
    return TaskOptions(**options)


def malformed_call(calls: Sequence[Any]) -> TypeError | None:
    """The error naming the first of ``enqueue_many``'s ``calls`` that is not an ``(args, kwargs)``
    pair, or None: looked for only after the batch failed, so a good batch pays nothing for it."""
    for place, call in enumerate(calls):
        if not (isinstance(call, (tuple, list)) and len(call) == 2 and isinstance(call[1], dict)) or isinstance(
            call[0], (str, bytes, dict)
        ):
            return TypeError(f"enqueue_many takes (args, kwargs) pairs, like ([1, 2], {{}}): call {place} is {call!r}")
    return None


def check_enqueue_options(options: dict[str, Any]) -> dict[str, Any]:
    """Check per-enqueue options; returns them unchanged. TypeError/ValueError at the call."""
    if not options:  # the common call: nothing to check
        return options
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:
        raise TypeError(f"unknown task option(s): {', '.join(sorted(unknown))}")
    checks = _CHECKS
    for name, value in options.items():
        # None means "not given" (like eta=None) except where None has no meaning for the option.
        if name in checks and (value is not None or name in ("retention", "unique_for", "priority")):
            checks[name](value)
    if options.get("delay") is not None and options.get("eta") is not None:
        raise ValueError("give delay or eta, not both")
    unique_key = options.get("unique_key")
    if unique_key is not None and (not isinstance(unique_key, str) or not unique_key):
        raise TypeError("unique_key must be a non-empty str")
    return options


def encode_travelling(options: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of the explicitly given travelling options."""
    out: dict[str, Any] = {}
    for name in TRAVELLING:
        if name not in options:
            continue
        value = options[name]
        if name == "backoff":
            value = value.to_dict()
        elif name == "retry_on":
            value = [f"{cls.__module__}.{cls.__qualname__}" for cls in value]
        out[name] = value
    return out


@dataclass(frozen=True)
class EffectiveOptions:
    """The options that apply to one execution of a task."""

    max_retries: int
    backoff: Backoff
    retry_on: tuple[str, ...]  # qualified class names; an exception matches if any class in its MRO is named
    timeout: float | None
    retention: float

    def retryable(self, exc: BaseException) -> bool:
        names = {f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__}
        return any(name in names for name in self.retry_on)


def decode_stored(text: str) -> dict[str, Any]:
    """The options stored with a task; SerializationError if they are not a JSON object."""
    stored = decode(text)
    if not isinstance(stored, dict):
        raise SerializationError(f"task options are not a JSON object: {text[:80]!r}")
    return stored


def resolve(stored: dict[str, Any], registered: TaskOptions | None) -> EffectiveOptions:
    """Explicit (stored with the task) > worker's registration > library defaults.

    ``UnknownBackoff`` if the stored backoff's kind is not registered in this process;
    ``SerializationError`` if a stored value is not one its option accepts (the row was damaged, or
    written by other code).
    """
    try:
        return _resolve(stored, registered)
    except UnknownBackoff:
        raise
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise SerializationError(f"stored task options cannot be decoded: {type(exc).__name__}: {exc}") from exc


def _resolve(stored: dict[str, Any], registered: TaskOptions | None) -> EffectiveOptions:
    base = registered or TaskOptions()
    backoff = base.backoff
    if "backoff" in stored:
        backoff = backoff_from_dict(stored["backoff"])
    retry_on = tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in base.retry_on)
    if "retry_on" in stored:
        if not isinstance(stored["retry_on"], list):
            raise TypeError("retry_on must be a list of class names")
        retry_on = tuple(str(name) for name in stored["retry_on"])
    max_retries = stored.get("max_retries", base.max_retries)
    timeout = stored.get("timeout", base.timeout)
    retention = stored.get("retention", base.retention)
    return EffectiveOptions(
        max_retries=int(max_retries),
        backoff=backoff,
        retry_on=retry_on,
        timeout=None if timeout is None else float(timeout),
        retention=float(retention) if math.isfinite(float(retention)) else base.retention,
    )


def describe_stored(text: str, registered: TaskOptions | None) -> tuple[dict[str, Any], int, str | None]:
    """For display (never raises): the stored options, the retry budget they give, and why they cannot
    be used (None when they can).

    A backoff kind this process has not registered is not an error here: admin tools (the CLI, the
    dashboard) need not import the app's policies; the worker that runs the task must.
    """
    try:
        stored = decode_stored(text)
    except SerializationError as exc:
        return {}, (registered or TaskOptions()).max_retries, str(exc)
    try:
        try:
            effective = resolve(stored, registered)
        except UnknownBackoff:
            effective = resolve({k: v for k, v in stored.items() if k != "backoff"}, registered)
    except SerializationError as exc:
        return stored, (registered or TaskOptions()).max_retries, str(exc)
    return stored, effective.max_retries, None
