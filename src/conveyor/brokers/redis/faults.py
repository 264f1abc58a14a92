"""Redis failures as ``conveyor.errors``: what a call that went wrong raises.

Connection loss and timeouts become ``BrokerUnavailable`` (bounded by the URL's timeouts, see
``config.py``), a server out of memory a ``BrokerError`` saying so (scripts check before their first
write, so nothing is half-written), a script's own refusal (an error reply starting ``CONVEYOR_``) a
:class:`Refused` for the operation to turn into its typed error, anything else a ``BrokerError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from conveyor.errors import BrokerError, BrokerUnavailable

__all__ = ["Refused", "failure", "translate_errors", "translated"]


def translated(exc: redis.RedisError) -> BrokerError:
    """The ``conveyor.errors`` exception for a redis-py exception (the caller raises it ``from exc``)."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return BrokerUnavailable(f"Redis is unreachable: {exc}")
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return BrokerError(
            "Redis is out of memory (maxmemory reached); nothing was written. Free memory, raise "
            f"maxmemory, or drain queues. Server said: {exc}"
        )
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        if text.startswith("OOM"):
            return BrokerError(f"Redis is out of memory (maxmemory reached); nothing was written: {text}")
        if text.startswith(("BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN")):
            return BrokerUnavailable(f"Redis cannot serve the call now: {text}")
        return BrokerError(f"Redis refused the call: {text}")
    return BrokerError(f"Redis client error: {exc}")


@contextmanager
def translate_errors() -> Iterator[None]:
    """Map every redis-py exception to ``conveyor.errors`` (see :func:`translated`)."""
    try:
        yield
    except redis.RedisError as exc:
        raise translated(exc) from exc


def failure(exc: redis.RedisError) -> Exception:
    """What a failed call raises: ``Refused`` for a script's own refusal, else a typed broker error."""
    if isinstance(exc, redis.ResponseError) and str(exc).startswith("CONVEYOR_"):
        return Refused(str(exc))
    return translated(exc)


class Refused(Exception):
    """A script refused the call (``CONVEYOR_<WHAT> <details>``); ``text`` is that whole message."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
