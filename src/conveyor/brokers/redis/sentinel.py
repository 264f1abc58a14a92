"""``redis+sentinel://``: one primary and its replicas watched by Redis Sentinel.

``redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[?namespace=...&db=N]`` names the
sentinels (port 26379 when left out) and the service they monitor (``sentinel monitor <service> ...``
in their configuration); ``rediss+sentinel://`` speaks TLS to the sentinels and the servers. The user
and password are the servers'; sentinels that ask for their own give ``sentinel_username=`` and
``sentinel_password=``. Every other option is as for ``redis://`` (``config.py``).

The client is redis-py's ``Sentinel(...).master_for(service)``: each new connection asks a sentinel
where the master is, and a connection that finds itself on a demoted master (a ``READONLY`` reply) drops
and reconnects. So after a failover every connection of the broker (its own stack in ``connections.py``,
the pub/sub listeners, the admin calls) follows the new master as soon as it reconnects; calls made while
no master is elected raise ``BrokerUnavailable``, which workers retry. See docs/reliability.md for what
a failover can lose, and ``replication.py`` (``wait_replicas``) for how to narrow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from conveyor.brokers.redis.tls import TlsConnection
from conveyor.errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "SCHEMES", "SENTINEL_OPTIONS", "SentinelRedis", "SentinelTarget", "sentinel_client"]

#: The URL schemes this module serves.
SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
#: Query options only a sentinel URL takes: the sentinels' own credentials.
SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})
#: Sentinel's usual port, for a host given without one.
DEFAULT_PORT = 26379

_EXAMPLE = "redis+sentinel://host:26379[,host:26379]/service_name"


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """What a sentinel URL names: the sentinels, the service, and the servers' client options."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    tls: bool
    userinfo: str  # "user:pass" as in the URL (still quoted), "" for none
    query: tuple[tuple[str, str], ...]  # the URL's options, Conveyor's own already taken out

    @classmethod
    def parse(cls, url: str) -> SentinelTarget:
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ConfigurationError(f"not a redis+sentinel:// URL: {url!r}")
        userinfo, _, hosts = parts.netloc.rpartition("@")
        safe = f"{parts.scheme}://{hosts}{parts.path}"
        sentinels = tuple(_address(host, safe) for host in hosts.split(","))
        service = unquote(parts.path.strip("/"))
        if not service or "/" in service:
            raise ConfigurationError(
                f"a sentinel URL names the monitored service as its path, {_EXAMPLE}; got {safe!r}"
            )
        query = tuple(parse_qsl(parts.query, keep_blank_values=True))
        return cls(sentinels, service, parts.scheme == "rediss+sentinel", userinfo, query)


def _address(text: str, url: str) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port`` too) as a pair; the default port when left out."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.partition(":")
    if not host:
        raise ConfigurationError(f"a sentinel URL needs at least one host:port, {_EXAMPLE}; got {url!r}")
    try:
        number = int(port) if port else DEFAULT_PORT
    except ValueError:
        raise ConfigurationError(f"bad sentinel port {port!r} in {url!r}") from None
    if not 0 < number < 65536:
        raise ConfigurationError(f"bad sentinel port {port!r} in {url!r}")
    return host, number


class SentinelRedis(redis.Redis):
    """The master's client; closing it also closes its connections to the sentinels."""

    sentinels: Sentinel | None = None  # not `sentinel`: redis.Redis has a SENTINEL command method

    def close(self) -> None:
        super().close()
        if self.sentinels is not None:
            self.sentinels.close()


class _SentinelConnection(SentinelManagedConnection):
    """A connection to the current master, wherever the sentinels say it is.

    redis-py's own pool connects each connection (``connect()``, which asks a sentinel) before its
    first command; ``connections.py`` sends the first command on a fresh one, which would make it
    connect to its placeholder address instead. So sending connects the sentinel way first.
    """

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class _TlsSentinelConnection(_SentinelConnection, TlsConnection):
    """A connection to the current master over TLS, with ``tls.py``'s diagnoses."""


def sentinel_client(url: str, common: dict[str, Any]) -> SentinelRedis:
    """A client of the master of ``url``'s service; ``common`` are the client options every URL gets
    (timeouts, pool size, retries; see ``RedisConfig.client``)."""
    target = SentinelTarget.parse(url)
    options = dict(target.query)
    sentinel_auth = {
        name.removeprefix("sentinel_"): options.pop(name) for name in sorted(SENTINEL_OPTIONS) if name in options
    }
    userinfo = f"{target.userinfo}@" if target.userinfo else ""
    # redis-py's own URL parser turns the options' texts into values, as it does for redis:// URLs
    kwargs: dict[str, Any] = parse_url(f"redis://{userinfo}sentinel?{urlencode(options)}")  # type: ignore[no-untyped-call]
    # the address each connection starts with, until a sentinel names the master: one nothing listens
    # on (port 0), so a connection that skipped the sentinels fails rather than reach localhost:6379
    kwargs["host"], kwargs["port"] = "127.0.0.1", 0
    tls: dict[str, Any] = {}
    kwargs["connection_class"] = _SentinelConnection
    if target.tls:
        tls = {key: value for key, value in kwargs.items() if key.startswith("ssl_")}
        kwargs["connection_class"] = _TlsSentinelConnection
    timeouts = {key: common[key] for key in ("socket_timeout", "socket_connect_timeout") if key in common}
    # one try per sentinel and lookup: the connection's own retries (``retries``) repeat the lookup
    once = {"retry": Retry(NoBackoff(), 0)}
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs={**timeouts, **once, **sentinel_auth, **({"ssl": True, **tls} if target.tls else {})},
    )
    client: SentinelRedis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, redis_class=SentinelRedis, **{**common, **kwargs}
    )  # the URL's own options win, as redis.Redis.from_url lets them
    client.sentinels = sentinel
    return client
