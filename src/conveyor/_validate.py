"""Argument checks shared by every layer: TypeError for wrong types, ValueError for wrong values."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

TASK_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: Any id a task may have: a custom or plain generated one, or one carrying its queue's label after "~"
#: (made by a broker that routes ids by label, ``LabelsIds``; the label: ``keys.queue_label``), which
#: may be given again as a custom id (the app then keeps it to a queue of that label); a partition's
#: label adds "|" and a base-36 suffix (``keys.partition_labels``: 3 digits at most up to 1024).
ANY_TASK_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}(?:~[A-Za-z0-9._-]{1,16}(?:\|[0-9a-z]{1,4})?)?")
QUEUE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
TASK_NAME_RE = re.compile(r"[A-Za-z0-9._:<>-]{1,200}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_seconds(what: str, value: object, *, allow_none: bool = False) -> float | None:
    """A finite, non-negative number of seconds."""
    if value is None and allow_none:
        return None
    if not _is_number(value):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)  # type: ignore[arg-type]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be finite and >= 0, got {value!r}")
    return seconds


def check_positive(what: str, value: object, *, allow_none: bool = False) -> float | None:
    """A finite number > 0."""
    if value is None and allow_none:
        return None
    if not _is_number(value):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be finite and > 0, got {value!r}")
    return number


#: The largest count a setting or a limit may hold: exact in a double (Redis's Lua numbers) and in a
#: SQLite INTEGER, so every backend stores what it was given (far above any real queue).
MOST_COUNT = 10**15


def check_aging(value: object) -> float:
    """A queue's ``aging``: seconds > 0, finite (None, to disable it, is the caller's to allow)."""
    seconds = check_seconds("aging", value)
    assert seconds is not None
    if seconds == 0:
        raise ValueError("aging must be > 0 (None disables aging)")
    return seconds


def check_int(
    what: str, value: object, *, minimum: int = 0, maximum: int | None = None, allow_none: bool = False
) -> int | None:
    """An int (not bool) >= minimum (and <= maximum, if given)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be <= {maximum:,}, got {value:,}")
    return value


def check_priority(value: object) -> int:
    checked = check_int("priority", value, minimum=-1_000_000)
    assert checked is not None
    if checked > 1_000_000:
        raise ValueError(f"priority must be between -1000000 and 1000000, got {value!r}")
    return checked


def check_task_id(value: object) -> str:
    """A task id: ``[A-Za-z0-9._:-]{1,128}``, then optionally ``~<label>`` (see :data:`ANY_TASK_ID_RE`)."""
    if not isinstance(value, str):
        raise TypeError(f"task id must be a str, not {type(value).__name__}")
    if not ANY_TASK_ID_RE.fullmatch(value):
        raise ValueError(f"task id must match [A-Za-z0-9._:-]{{1,128}}, then optionally ~<label>, got {_shown(value)}")
    return value


def _shown(value: str, most: int = 80) -> str:
    """``value`` as an error message quotes it: its start only when long (an id pasted whole from a
    log line, say), with its length."""
    if len(value) <= most:
        return repr(value)
    return f"{value[:most]!r}... ({len(value)} characters)"


def check_queue(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"queue name must be a str, not {type(value).__name__}")
    if not QUEUE_RE.fullmatch(value):
        raise ValueError(f"queue name must match [A-Za-z0-9._-]{{1,64}}, got {_shown(value)}")
    return value


def check_task_name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"task name must be a str, not {type(value).__name__}")
    if not TASK_NAME_RE.fullmatch(value):
        raise ValueError(f"task name must match [A-Za-z0-9._:<>-]{{1,200}}, got {_shown(value)}")
    return value


def check_retry_on(value: object) -> tuple[type[BaseException], ...]:
    if not isinstance(value, tuple):
        raise TypeError(f"retry_on must be a tuple of exception classes, not {type(value).__name__}")
    if not value:
        raise ValueError("retry_on must not be empty")
    for item in value:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"retry_on must hold exception classes, got {item!r}")
    return value


#: The times a task may carry, epoch seconds: those a date shows (years 1 to 9999, UTC), so that every
#: store, page and command can show them.
EARLIEST, LATEST = -62135596800.0, 253402300799.0


def _datable(when: float) -> bool:
    return EARLIEST <= when <= LATEST


def check_time(what: str, when: float, given: object = None) -> float:
    """``when`` (epoch seconds, what ``given`` came to) if it falls in years 1 to 9999, else ValueError."""
    if not _datable(when):
        shown = given if given is not None else when
        raise ValueError(f"{what} {shown!r} falls outside the years 1 to 9999 (epoch seconds {when!r})")
    return when


def check_when(what: str, value: object, now: float) -> float | None:
    """An absolute time: an aware datetime or epoch seconds (finite, years 1 to 9999). Returns epoch
    seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{what} must be a timezone-aware datetime")
        return check_time(what, value.timestamp(), value)
    if not _is_number(value):
        raise TypeError(f"{what} must be an aware datetime or epoch seconds, not {type(value).__name__}")
    when = float(value)  # type: ignore[arg-type]
    if not math.isfinite(when):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return check_time(what, when)


def check_after(what: str, seconds: float, now: float) -> float:
    """``now + seconds`` (a delay, an expiry), if it falls in years 1 to 9999."""
    when = now + seconds
    if not _datable(when):
        raise ValueError(f"{what} of {seconds!r} s ends past the year 9999 (epoch seconds {when!r})")
    return when


def check_expires(value: object, now: float) -> float | None:
    """``expires``: seconds after ``now``, or an aware datetime. Returns an absolute deadline."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return check_when("expires", value, now)
    seconds = check_seconds("expires", value)
    assert seconds is not None
    return check_after("expires", seconds, now)


def check_mapping(what: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be str, got {key!r}")
    return value
