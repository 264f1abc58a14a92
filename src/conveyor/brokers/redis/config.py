"""``redis://`` URL options and the client built from them.

``redis://[user:pass@]host:port/db?namespace=...`` (``rediss://`` for TLS) names one server;
``redis+cluster://[user:pass@]host:port[,host:port...][/?namespace=...]`` (``rediss+cluster://`` for TLS)
names a Redis Cluster by one or more seed nodes (database 0 only: a cluster has no other). A plain URL
naming a node of a cluster works too: the broker notices it (``cluster.py``).
``redis+sentinel://[user:pass@]host:port[,host:port]/service_name?namespace=...`` (``rediss+sentinel://``;
see ``sentinel.py``) names a primary under Redis Sentinel. Conveyor's own query
options are taken out; every other query option goes to redis-py unchanged: ``ssl_ca_certs`` (a private
CA), ``ssl_certfile`` and ``ssl_keyfile`` (client certificates), ``ssl_cert_reqs``, ... (see
``docs/operations.md``; ``tests/brokers/test_redis_security.py`` runs them against a TLS server).

============================== ========== ===========================================================
option                         default    meaning
============================== ========== ===========================================================
``namespace``                  conveyor   key prefix (hash tag) so apps or tenants share a server
``socket_timeout``             5.0        seconds a command may take before ``BrokerUnavailable``
``socket_connect_timeout``     2.0        seconds to connect (TLS handshake included) before ``BrokerUnavailable``
``max_connections``            64         connection pool size per broker object
``retries``                    2          reconnect attempts (short backoff) on a dropped connection
``clock_refresh``              60.0       seconds between re-measurements of the server clock offset
``wait_replicas``              0          replicas every write script must reach (``WAIT``; ``replication.py``)
``wait_timeout``               1000       milliseconds ``WAIT`` waits for them (below ``socket_timeout``)
============================== ========== ===========================================================

So a producer learns ``BrokerUnavailable`` within about ``socket_connect_timeout * (retries + 1)``
seconds (plus backoff, at most 0.25 s per retry) when the server is down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode
from redis.connection import parse_url
from redis.retry import Retry

from conveyor.brokers.redis.cluster import MOVING_PATIENCE, ClusterClient
from conveyor.brokers.redis.keys import Keys
from conveyor.brokers.redis.sentinel import SCHEMES, SENTINEL_OPTIONS, SentinelTarget, sentinel_client
from conveyor.brokers.redis.tls import TlsConnection
from conveyor.errors import ConfigurationError
from conveyor.urls import redact

__all__ = ["RedisConfig"]


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Where the server is and how to talk to it (see the module docstring for the defaults)."""

    url: str  # the URL without Conveyor's own query options
    namespace: str = "conveyor"
    socket_timeout: float = 5.0
    socket_connect_timeout: float = 2.0
    max_connections: int = 64
    retries: int = 2
    clock_refresh: float = 60.0
    wait_replicas: int = 0
    wait_timeout: int = 1000

    @property
    def cluster(self) -> bool:
        """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
        return urlsplit(self.url).scheme.endswith("+cluster")

    @property
    def resend_window(self) -> float:
        """Seconds after a call ran within which the broker may still send it again (its connection
        lost before the reply was read): at most ``2 * (max(3, retries) + 1)`` sends (the hot path's
        retries, then on a cluster redis-py's own, which retry at least 3 times), each ended within
        its connect and read timeouts and a backoff of at most 0.25 s, plus a cluster's patience with
        a slot being moved. An enqueue keeps its answer for a repeat that long (``lua/_resend.lua``)."""
        sends = 2 * (max(3, self.retries) + 1)
        return sends * (self.socket_connect_timeout + self.socket_timeout + 0.25) + MOVING_PATIENCE

    @property
    def sentinel(self) -> bool:
        """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` URL."""
        return urlsplit(self.url).scheme in SCHEMES

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme.startswith("rediss")

    @property
    def seeds(self) -> list[tuple[str, int]]:
        """The URL's ``host:port`` pairs (one for a plain URL)."""
        return _seeds(urlsplit(self.url).netloc.rpartition("@")[2])

    @classmethod
    def from_url(cls, url: str) -> RedisConfig:
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES and parts.scheme not in SCHEMES:
            raise ConfigurationError(
                "not a redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel:// or"
                f" rediss+sentinel:// URL: {redact(url)!r}"
            )
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        _check_options(url, parts.scheme, query)
        if parts.scheme.endswith("+cluster"):
            _check_cluster(url, parts.path, query)
        elif parts.scheme in _SCHEMES and not _is_database(parts.path.removeprefix("/")):
            raise ConfigurationError(
                f"bad redis URL {redact(url)!r}: the path names the database, a number (0 to 15 usually)"
            )
        if not _valid_seeds(parts.netloc):
            raise ConfigurationError(
                f"bad redis URL {redact(url)!r}: each port must be a number from 1 to 65535"
                " (redis://[user:password@]host[:port][/db])"
            )
        try:
            config = cls(
                url=urlunsplit(parts._replace(query=urlencode({k: v for k, v in query.items() if k not in _OURS}))),
                namespace=query.get("namespace", "conveyor"),
                socket_timeout=_positive("socket_timeout", query.get("socket_timeout", "5.0")),
                socket_connect_timeout=_positive("socket_connect_timeout", query.get("socket_connect_timeout", "2.0")),
                max_connections=int(query.get("max_connections", "64")),
                retries=int(query.get("retries", "2")),
                clock_refresh=_positive("clock_refresh", query.get("clock_refresh", "60.0")),
                wait_replicas=_whole("wait_replicas", query.get("wait_replicas", "0")),
                wait_timeout=_whole("wait_timeout", query.get("wait_timeout", "1000")),
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad redis URL {redact(url)!r}: {exc}") from exc
        Keys(config.namespace)  # validates the namespace
        if config.max_connections < 1 or config.retries < 0:
            raise ConfigurationError(f"bad redis URL {redact(url)!r}: max_connections >= 1 and retries >= 0 required")
        # WAIT must end before the socket times out (only a WAIT sent needs it)
        bound = config.socket_timeout * 1000 if config.wait_replicas else math.inf
        if config.wait_replicas < 0 or not 0 < config.wait_timeout < bound:
            raise ConfigurationError(
                f"bad redis URL {redact(url)!r}: wait_replicas >= 0 and 0 < wait_timeout (ms)"
                " < socket_timeout * 1000 required"
            )
        if parts.scheme in SCHEMES:
            SentinelTarget.parse(config.url)  # a missing service name is refused here, not at the first call
        return config

    def client(self) -> redis.Redis:
        """A pooled, thread-safe client that decodes replies as UTF-8 text (of a cluster URL: on its
        first seed node, for what any node answers: TIME, INFO; of a Sentinel URL: on the primary)."""
        common: dict[str, Any] = {
            "decode_responses": True,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_connect_timeout,
            "max_connections": self.max_connections,
            "retry": Retry(ExponentialBackoff(cap=0.25, base=0.025), self.retries, (redis.ConnectionError,)),
            "health_check_interval": 30,
        }
        if urlsplit(self.url).scheme in SCHEMES:
            return sentinel_client(self.url, common)
        tls = {"connection_class": TlsConnection} if self.tls else {}
        return redis.Redis.from_url(self._node_url(self.seeds[0]), **tls, **common)

    def cluster_client(self) -> ClusterClient:
        """redis-py's cluster client seeded with the URL's nodes, with this URL's credentials, TLS
        options and timeouts (``max_connections`` per node)."""
        options = parse_url(self._node_url(self.seeds[0]))  # type: ignore[no-untyped-call]
        for name in ("host", "port", "db", "connection_class"):
            options.pop(name, None)
        if self.tls:
            options["connection_class"] = TlsConnection
        return ClusterClient(
            startup_nodes=[ClusterNode(host, port) for host, port in self.seeds],  # type: ignore[no-untyped-call]
            decode_responses=True,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.socket_connect_timeout,
            max_connections=self.max_connections,
            retry=Retry(ExponentialBackoff(cap=0.25, base=0.025), max(3, self.retries)),
            health_check_interval=30,
            **options,
        )

    def _node_url(self, node: tuple[str, int]) -> str:
        """This URL for one node: ``redis://`` or ``rediss://``, that host and port, the same options."""
        parts = urlsplit(self.url)
        if not self.cluster:
            return self.url
        auth, at, _ = parts.netloc.rpartition("@")
        host = f"[{node[0]}]" if ":" in node[0] else node[0]
        scheme = "rediss" if self.tls else "redis"
        return urlunsplit(parts._replace(scheme=scheme, netloc=f"{auth}{at}{host}:{node[1]}", path="/0"))


_SCHEMES = frozenset({"redis", "rediss", "redis+cluster", "rediss+cluster"})

_OURS = frozenset(
    {
        "namespace",
        "socket_timeout",
        "socket_connect_timeout",
        "max_connections",
        "retries",
        "clock_refresh",
        "wait_replicas",
        "wait_timeout",
    }
)


#: redis-py's options that a URL can carry as text (its own parsers, plus the string-valued ones).
_CLIENT_OPTIONS = frozenset(
    {
        "db",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "health_check_interval",
        "protocol",
        "client_name",
        "username",
        "password",
        "encoding",
        "encoding_errors",
    }
)
_TLS_OPTIONS = frozenset(
    {
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_password",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_min_version",
    }
)


def _check_options(url: str, scheme: str, query: dict[str, str]) -> None:
    """Refuse an option redis-py would choke on later, with a message naming the valid ones (an
    unknown option would otherwise fail at the first command, as a TypeError from deep in redis-py)."""
    valid = _OURS | _CLIENT_OPTIONS | (_TLS_OPTIONS if scheme.startswith("rediss") else frozenset())
    if scheme in SCHEMES:
        valid |= SENTINEL_OPTIONS
    for key in query:
        if key in valid:
            continue
        if key in _TLS_OPTIONS:
            raise ConfigurationError(
                f"redis URL option {key!r} needs TLS: use {scheme.replace('redis', 'rediss', 1)}:// instead of {scheme}://"
            )
        safe = urlunsplit(urlsplit(url)._replace(netloc=urlsplit(url).netloc.rpartition("@")[2], query=""))
        raise ConfigurationError(
            f"unknown redis URL option {key!r} in {safe}; valid options: {', '.join(sorted(valid))}"
        )


def _whole(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {text!r}") from None


def _positive(name: str, text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {text!r}")
    return value


def _seeds(hosts: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (IPv6 hosts in brackets; port 6379 when left out) as pairs."""
    seeds = []
    for item in hosts.split(","):
        host, port = item.strip(), 6379
        if host.startswith("["):
            address, _, rest = host[1:].partition("]")
            host, port = address, int(rest[1:]) if rest.startswith(":") else 6379
        elif ":" in host:
            host, _, text = host.rpartition(":")
            port = int(text)
        seeds.append((host or "localhost", port))
    return seeds


def _valid_seeds(netloc: str) -> bool:
    """Whether the hosts of ``netloc`` (after any credentials) parse, each port a number from 1 to 65535."""
    try:
        seeds = _seeds(netloc.rpartition("@")[2])
    except ValueError:
        return False
    return bool(seeds) and all(0 < port < 65536 for _, port in seeds)


def _is_database(text: str) -> bool:
    """Whether a plain URL's path (without its ``/``) names a database: none, or a number (redis-py
    would take anything else as database 0)."""
    return text == "" or (text.isascii() and text.isdigit())


def _check_cluster(url: str, path: str, query: dict[str, str]) -> None:
    """A cluster URL's seeds must parse and it may name no database but 0."""
    if path not in ("", "/", "/0") or query.get("db", "0") != "0":
        raise ConfigurationError(f"a Redis Cluster has database 0 only; remove the database from {redact(url)!r}")
    if not _valid_seeds(urlsplit(url).netloc):
        raise ConfigurationError(
            f"bad redis+cluster URL {redact(url)!r}: give the seed nodes as host:port[,host:port...]"
        )
