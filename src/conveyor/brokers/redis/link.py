"""Which client a broker talks through, chosen at its first call: one server, or a Redis Cluster.

A ``redis+cluster://`` URL gets redis-py's cluster client (``cluster.ClusterClient``); a plain URL whose
server says it is a cluster node (``INFO cluster``: ``cluster_enabled:1``) gets it too, seeded with that
node, and a log line says so; anything else keeps the plain client and its hot-path ``Connections``.
Choosing at the first call rather than when the broker is made keeps making a broker free of network
round trips (a producer may build one before its server is up).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

import redis
from redis.cluster import RedisCluster

from conveyor.brokers.redis.cluster import ClusterCalls, is_cluster_node
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.connections import Connections
from conveyor.brokers.redis.faults import translate_errors
from conveyor.errors import ConfigurationError

__all__ = ["Link", "connect"]

log = logging.getLogger("conveyor.brokers.redis")

#: How a server refuses the URL's database: Valkey's words and Redis 7's (in cluster mode).
_NO_DATABASE = ("DB index is out of range", "SELECT is not allowed in cluster mode")


@dataclass(frozen=True, slots=True)
class Link:
    """The client a broker talks through and the connections its operations use."""

    client: redis.Redis
    conns: Connections | ClusterCalls

    @classmethod
    def cluster(cls, client: RedisCluster) -> Link:
        # typed as redis.Redis: RedisCluster has the same command methods the broker's modules call
        return cls(cast("redis.Redis", client), ClusterCalls(client))

    def close(self, plain: redis.Redis) -> None:
        """Close the connections, and the client unless it is ``plain`` (its owner closes that one)."""
        self.conns.close()
        if self.client is not plain:
            self.client.close()


def connect(config: RedisConfig, plain: redis.Redis) -> Link:
    """The link for ``config``; ``plain`` is the broker's client on the URL's (first) node. Raises
    ``conveyor.errors`` when the server cannot be reached."""
    if config.sentinel:  # Sentinel watches one primary with replicas, never a cluster: no probe to make
        return Link(plain, Connections(plain.connection_pool))
    with translate_errors():
        if config.cluster:
            return Link.cluster(config.cluster_client())
        try:
            clustered = is_cluster_node(plain)
        except redis.ResponseError as exc:
            if not any(refusal in str(exc) for refusal in _NO_DATABASE):
                raise
            # a cluster node refuses SELECT of any database but 0 (so may a server with fewer databases)
            raise ConfigurationError(
                f"{config.seeds[0][0]}:{config.seeds[0][1]} refused the URL's database ({exc}): a Redis"
                " Cluster has database 0 only, and a server as many as its `databases` setting"
            ) from None
        if clustered:
            host, port = config.seeds[0]
            log.info(
                "%s:%s is a node of a Redis Cluster: using the cluster client (redis+cluster:// names a cluster"
                " by several seed nodes)",
                host,
                port,
            )
            return Link.cluster(config.cluster_client())
    return Link(plain, Connections(plain.connection_pool))
