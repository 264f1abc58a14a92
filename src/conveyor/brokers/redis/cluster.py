"""Redis Cluster: redis-py's ``RedisCluster`` as the broker's client, and how a cluster is recognised.

Topology discovery, ``MOVED``/``ASK`` redirects, node failures and slot migrations are the cluster
client's job, never ours. Two things are added to it:

- :class:`ClusterClient` routes ``FCALL`` by its first key, as redis-py routes ``EVALSHA``: redis-py
  otherwise asks the server which arguments are keys (``COMMAND GETKEYS``, one more round trip with the
  whole call's arguments) before every ``FCALL``, since the command's keys are "movable".
- :class:`ClusterCalls` offers ``Connections``' two methods (``execute``, ``execute_each``) on top of the
  cluster client, so the broker's operations run unchanged: each command goes through
  ``RedisCluster.execute_command`` (routing, redirects and retries included), error replies returned
  in their place. A blocking pop and the claim queued behind it therefore go as two round trips on a
  cluster rather than one write.

A plain ``redis://`` URL naming a node of a cluster is recognised by :func:`is_cluster_node` (``INFO
cluster`` says ``cluster_enabled:1``) when the broker first talks to the server; the broker then
switches to the cluster client, seeded with that node, and logs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from conveyor.brokers.redis.connections import Command

__all__ = ["ClusterCalls", "ClusterClient", "is_cluster_node"]


class ClusterClient(RedisCluster):
    """``RedisCluster`` that routes ``FCALL`` by its first key without asking the server."""

    def determine_slot(self, *args: Any) -> int | None:
        command = args[0]
        if isinstance(command, str) and command.upper() in ("FCALL", "FCALL_RO") and len(args) > 3 and int(args[2]):
            slot: int = self.keyslot(args[3])  # type: ignore[no-untyped-call]
            return slot
        found: int | None = super().determine_slot(*args)
        return found


class ClusterCalls:
    """``Connections.execute`` and ``execute_each`` through a cluster client."""

    def __init__(self, client: RedisCluster) -> None:
        self._client = client

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Run ``commands`` one after another; their replies in order, an error reply as a
        ``redis.ResponseError`` in its place (connection errors and timeouts raise, after the
        client's retries)."""
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(self._client.execute_command(*command))  # type: ignore[no-untyped-call]
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def execute_each(self, commands: Iterator[Command], handle: Callable[[Command, Any], None]) -> None:
        """Run ``commands`` one after another, ``handle(command, reply)`` after each (an exception
        from it stops the rest unsent)."""
        for command in commands:
            handle(command, self.execute([command])[0])

    def close(self) -> None:
        """Nothing of its own to close: the cluster client's pools are closed with the client."""


def is_cluster_node(client: redis.Redis) -> bool:
    """True if the server ``client`` talks to is a node of a Redis Cluster (``INFO cluster``).

    A user the ACL forbids ``INFO`` (it is in ``@dangerous``; ``faults.NEEDED_ACL`` does not grant it)
    is taken to be on one server: on a cluster it names the cluster with ``redis+cluster://``."""
    try:
        info: dict[str, Any] = client.info("cluster")
    except redis.exceptions.NoPermissionError:
        return False
    return str(info.get("cluster_enabled", "0")) == "1"
