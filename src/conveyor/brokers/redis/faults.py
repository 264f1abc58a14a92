"""Redis failures as ``conveyor.errors``: what a call that went wrong raises.

Connection loss and timeouts become ``BrokerUnavailable`` (bounded by the URL's timeouts, see
``config.py``); so do a refused password and a failed TLS connection (``tls.py`` finds its cause), each
with a message saying which URL option fixes it (the server side may be what is wrong, so workers keep
retrying). A call the
server's ACL forbids is a ``BrokerError`` naming the permissions Conveyor needs, a server out of
memory a ``BrokerError`` saying so (scripts check before their first write, so nothing is
half-written), a script's own refusal (an error reply starting ``CONVEYOR_``) a :class:`Refused` for
the operation to turn into its typed error, anything else a ``BrokerError``.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.sentinel import MasterNotFoundError

from conveyor.brokers.redis.tls import TlsTrouble
from conveyor.errors import BrokerError, BrokerUnavailable

__all__ = ["CLIENT_ERRORS", "NEEDED_ACL", "Refused", "failure", "translate_errors", "translated"]

#: What redis-py raises: its errors, and the cluster client's own (``RedisClusterException`` when no
#: seed node answers or a slot has no node, which is not a ``RedisError``).
CLIENT_ERRORS = (redis.RedisError, RedisClusterException)


#: What a Redis ACL user needs for namespace NS (keys and channels under its hash tags: the namespace
#: slot's ``{NS}:`` and, in layout 5, every queue slot's ``{NS|<label>}:``), as ``ACL SETUSER``
#: takes it after ``on >password``, and nothing more: no command that reaches beyond the namespace
#: (``FLUSHALL``, ``FUNCTION FLUSH``, ``SCAN``, ...), so tenants sharing a server cannot harm or see each
#: other. ``+config|get`` may be added where one app owns the server, so that the preflight can read the
#: persistence and eviction settings (it reads every setting, ``requirepass`` included). The
#: ``cluster|...`` reads are what the cluster client needs to learn the topology (harmless on one
#: server). Tested in ``tests/brokers/test_redis_security.py``.
NEEDED_ACL = (
    "~{NS}:* ~{NS|* &{NS}:* &{NS|*"
    " -@all +@read +@write +@scripting +@pubsub +@transaction +@connection +time -@dangerous"
    " -scan -randomkey -function|flush -function|delete -function|restore -script|flush"
    " +cluster|slots +cluster|shards +cluster|info +cluster|myid"
)


def _tls_trouble(exc: BaseException) -> str | None:
    """What to check when a connection failed in TLS for a cause ``tls.py`` could not tell, or None."""
    context, text = exc.__context__, str(exc)
    if isinstance(context, ssl.SSLError) or "[SSL" in text or "_ssl.c" in text:
        return (
            "the TLS connection to Redis failed; if it persists, check the TLS options: a server that asks "
            "for client certificates needs ssl_certfile= and ssl_keyfile= in the rediss:// URL"
        )
    return None


#: A redis-py client's repr (about 1 KB each) in a sentinel error: its host and port are what matter.
_CLIENT_REPR = re.compile(r"<redis\.client\.Redis\(.*?[(,]host=([^,]+),port=(\d+)[,)].*?\)>\)>\)>")


def translated(exc: redis.RedisError | RedisClusterException) -> BrokerError:
    """The ``conveyor.errors`` exception for a redis-py exception (the caller raises it ``from exc``)."""
    if isinstance(exc, RedisClusterException) or (isinstance(exc, ClusterError) and not isinstance(exc, ResponseError)):
        return BrokerUnavailable(f"the Redis Cluster cannot serve the call now: {exc}")
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
        return BrokerUnavailable(
            f"Redis refused to authenticate this client ({exc}): give the password in the URL, "
            "redis://:PASSWORD@host:port/db, or an ACL user and its password, redis://USER:PASSWORD@host:port/db"
        )
    if isinstance(exc, TlsTrouble):
        return BrokerUnavailable(str(exc))
    trouble = _tls_trouble(exc) if isinstance(exc, redis.ConnectionError) else None
    if trouble is not None:
        return BrokerUnavailable(f"{trouble} ({exc})")
    if isinstance(exc, MasterNotFoundError):  # redis-py names each sentinel by its whole client's repr
        return BrokerUnavailable("Redis is unreachable: " + _CLIENT_REPR.sub(r"sentinel \1:\2", str(exc)))
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return BrokerUnavailable(f"Redis is unreachable: {exc}")
    if isinstance(exc, redis.exceptions.NoPermissionError) or (
        isinstance(exc, redis.ResponseError) and "user executing the script can't" in str(exc)
    ):
        return BrokerError(
            f"the Redis user may not do this ({exc}); for namespace NS Conveyor needs the ACL {NEEDED_ACL}"
        )
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return BrokerError(
            "Redis is out of memory (maxmemory reached); nothing was written. Free memory, raise "
            f"maxmemory, or drain queues. Server said: {exc}"
        )
    if isinstance(exc, (ClusterDownError, TryAgainError, ReadOnlyError)):  # a server between two states
        return BrokerUnavailable(f"Redis cannot serve the call now: {type(exc).__name__}: {exc}")
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        if text.startswith("OOM"):
            return BrokerError(f"Redis is out of memory (maxmemory reached); nothing was written: {text}")
        if text.startswith(("BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN")) or "non local key" in text:
            return BrokerUnavailable(f"Redis cannot serve the call now: {text}")
        return BrokerError(f"Redis refused the call: {text}")
    return BrokerError(f"Redis client error: {exc}")


@contextmanager
def translate_errors() -> Iterator[None]:
    """Map every redis-py exception to ``conveyor.errors`` (see :func:`translated`)."""
    try:
        yield
    except CLIENT_ERRORS as exc:
        raise translated(exc) from exc


def failure(exc: redis.RedisError | RedisClusterException) -> Exception:
    """What a failed call raises: ``Refused`` for a script's own refusal, else a typed broker error."""
    if isinstance(exc, redis.ResponseError) and str(exc).startswith("CONVEYOR_"):
        return Refused(str(exc))
    return translated(exc)


class Refused(Exception):
    """A script refused the call (``CONVEYOR_<WHAT> <details>``); ``text`` is that whole message."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
