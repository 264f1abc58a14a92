"""``sqlite:///path.db?option=value``: the SQLite broker's settings, parsed from its URL.

``sqlite:///relative/path.db`` is relative to the working directory, ``sqlite:////abs/path.db`` is
absolute. Query options (all optional):

``synchronous`` (default ``FULL``)
    ``OFF``, ``NORMAL``, ``FULL`` or ``EXTRA`` (any case). ``FULL`` syncs the WAL at every commit but
    a claim's that settles nothing (``db.py``), so every acknowledged enqueue and outcome survives a
    power cut or OS crash too. ``NORMAL`` syncs only
    at checkpoints: it never corrupts the file and loses nothing when a *process* dies (committed
    transactions are in the WAL, which the OS owns), but a power cut or OS crash can roll back the
    last commits; it is several times faster where commits are small (figures: docs/reliability.md).
``busy_timeout`` (default ``5000``, milliseconds)
    How long one call waits for another process's write lock, in total, before it raises
    ``BrokerUnavailable``. ``SQLITE_BUSY`` never reaches the caller before that.
``poll_interval`` (default ``0.05``, seconds)
    How often the event poller (started by the first ``subscribe``) reads events written by other
    processes: the cross-process event latency is about this long.
``events_kept`` (default ``100000``)
    The events table keeps about this many of the newest events; older ones are trimmed. A poller
    that falls further behind than this misses events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from conveyor.errors import ConfigurationError

__all__ = ["SQLiteConfig"]

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


@dataclass(frozen=True, slots=True)
class SQLiteConfig:
    """Where the database lives and how connections to it behave (see the module docstring)."""

    path: str
    synchronous: str = "FULL"
    busy_timeout: float = 5.0  # seconds
    poll_interval: float = 0.05
    events_kept: int = 100_000

    @classmethod
    def from_url(cls, url: str) -> SQLiteConfig:
        parts = urlsplit(url)
        if parts.scheme.lower() != "sqlite":
            raise ConfigurationError(f"not a sqlite:// URL: {url!r}")
        if not url[len("sqlite") :].startswith("://"):  # sqlite:/x.db would quietly be a relative x.db
            raise ConfigurationError(
                f"malformed sqlite URL {url!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        if parts.netloc:
            raise ConfigurationError(
                f"sqlite URL {url!r} has a host part; use sqlite:///relative.db or sqlite:////absolute.db"
            )
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not path or path.endswith("/"):
            raise ConfigurationError(f"sqlite URL {url!r} names no database file")
        if path == ":memory:" or path.startswith("file:"):
            raise ConfigurationError("an in-memory SQLite database cannot be shared; use memory:// instead")
        options: dict[str, object] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key == "synchronous":
                options[key] = _synchronous(value)
            elif key == "busy_timeout":
                options[key] = _number(key, value) / 1000.0
            elif key == "poll_interval":
                interval = _number(key, value)
                if interval <= 0:
                    raise ConfigurationError(f"poll_interval must be > 0, got {value!r}")
                options[key] = interval
            elif key == "events_kept":
                options[key] = _count(key, value)
            else:
                known = "busy_timeout, events_kept, poll_interval, synchronous"
                raise ConfigurationError(f"unknown sqlite URL option {key!r} (known: {known})")
        return cls(path=path, **options)  # type: ignore[arg-type]


def _synchronous(value: str) -> str:
    mode = value.upper()
    if mode not in _SYNCHRONOUS:
        raise ConfigurationError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {value!r}")
    return mode


def _number(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigurationError(f"{key} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigurationError(f"{key} must be finite and >= 0, got {value!r}")
    return number


def _count(key: str, value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise ConfigurationError(f"{key} must be an integer, got {value!r}") from None
    if count < 1:
        raise ConfigurationError(f"{key} must be >= 1, got {value!r}")
    return count
