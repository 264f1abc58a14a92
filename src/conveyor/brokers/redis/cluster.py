"""Redis Cluster: redis-py's ``RedisCluster`` as the broker's client, and how a cluster is recognised.

Topology discovery, ``MOVED``/``ASK`` redirects, node failures and slot migrations are the cluster
client's job, never ours. Two things are added to it:

- :class:`ClusterClient` routes ``FCALL`` by its first key, as redis-py routes ``EVALSHA``: redis-py
  otherwise asks the server which arguments are keys (``COMMAND GETKEYS``, one more round trip with the
  whole call's arguments) before every ``FCALL``, since the command's keys are "movable".
- :class:`ClusterCalls` offers ``Connections``' two methods (``execute``, ``execute_each``) on a
  cluster, so the broker's operations run unchanged: on the connections of the master redis-py's slot
  table names, and through ``RedisCluster.execute_command`` (redirects, topology refresh, retries)
  whenever that node answers with a redirect or cannot be reached. A call ending in ``WAIT``
  (``wait_replicas``) never goes through the cluster client: ``WAIT`` counts the replicas holding what
  *its connection* wrote, so it must follow the script on the same connection; such a call follows
  redirects and failovers itself (:meth:`ClusterCalls.execute`).

A plain ``redis://`` URL naming a node of a cluster is recognised by :func:`is_cluster_node` (``INFO
cluster`` says ``cluster_enabled:1``) when the broker first talks to the server; the broker then
switches to the cluster client, seeded with that node, and logs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode as Node
from redis.cluster import ClusterPipeline, RedisCluster
from redis.connection import AbstractConnection
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisClusterException,
    TryAgainError,
)

from conveyor.brokers.redis.connections import Command, Connections
from conveyor.brokers.redis.keys import keyslot

__all__ = ["MOVING_PATIENCE", "ClusterCalls", "ClusterClient", "in_limbo", "is_cluster_node", "moving"]

#: Seconds a call refused mid-migration (:func:`moving`, :func:`in_limbo`) is retried before its error is
#: returned or raised.
MOVING_PATIENCE = 5.0


class _Patience:
    """A call's :data:`MOVING_PATIENCE` seconds of waiting for the cluster: pauses from 5 ms, doubling
    up to 0.2 s."""

    def __init__(self) -> None:
        self._pause, self._deadline = 0.005, time.monotonic() + MOVING_PATIENCE

    def over(self) -> bool:
        return time.monotonic() >= self._deadline

    def pause(self) -> None:
        time.sleep(self._pause)
        self._pause = min(self._pause * 2, 0.2)


class ClusterClient(RedisCluster):
    """``RedisCluster`` that routes ``FCALL`` by its first key without asking the server, and waits out
    a slot between two owners (:func:`in_limbo`) for up to :data:`MOVING_PATIENCE` seconds."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        patience = _Patience()
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except ClusterError as exc:
                if not in_limbo(exc) or patience.over():
                    raise
            patience.pause()  # waiting for the operator's tool to tell the target it owns the slot

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe: ClusterPipeline = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        # a pipeline sends its redirected commands again one by one through this: the same patience
        pipe.parent_execute_command = self.execute_command
        return pipe

    def determine_slot(self, *args: Any) -> int | None:
        command = args[0]
        if isinstance(command, str) and command.upper() in ("FCALL", "FCALL_RO") and len(args) > 3 and int(args[2]):
            slot: int = self.keyslot(args[3])  # type: ignore[no-untyped-call]
            return slot
        found: int | None = super().determine_slot(*args)
        return found


class ClusterCalls:
    """``Connections.execute`` and ``execute_each`` on a cluster.

    The fast path sends a call's commands (they share one slot: an ``FCALL``, maybe a blocking pop on
    the same namespace before it; or the ``HMGET`` of custom ids' entries) on a ``Connections`` of the
    master that redis-py's slot table says serves the slot, as on one server. Anything else goes
    through ``RedisCluster.execute_command``, which follows redirects and refreshes the topology: a
    ``MOVED``, ``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN`` reply (the server ran nothing of the
    command), or a connection that failed after its retries. So redirects, failovers and migrations
    stay redis-py's job; the fast path only saves its per-command bookkeeping
    (docs/performance-notes.md, "Redis Cluster").
    """

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        self._slots: dict[str, int] = {}  # routing key -> slot (the broker uses a handful of keys)
        self._nodes: dict[str, Connections] = {}  # by node name, "host:port"
        self._lock = threading.Lock()

    def _routed(self, commands: Sequence[Command]) -> Connections | None:
        """The connections of the master serving the slot of the call's key, or None. The call is the
        last command, or the one before a final ``WAIT``."""
        command = commands[-2] if len(commands) > 1 and commands[-1][0] == "WAIT" else commands[-1]
        if command[0] == "HMGET" and len(command) > 2:  # by-id calls' entries (RedisCalls._task_prefixes)
            return self.serving(str(command[1]))
        if command[0] != "FCALL" or len(command) < 4 or not command[2]:
            return None
        return self.serving(str(command[3]))

    def _connections(self, node: Node) -> Connections:
        conns = self._nodes.get(node.name)
        if conns is None:
            with self._lock:  # cold: once per node; two threads must not each make (and leak) a set
                conns = self._nodes.get(node.name)
                if conns is None:
                    connection = node.redis_connection or self._client.get_redis_connection(node)
                    conns = self._nodes[node.name] = Connections(connection.connection_pool)
        return conns

    def serving(self, key: str) -> Connections:
        """The connections of the master redis-py's slot table says serves ``key``'s slot (raises
        ``RedisClusterException`` when none does)."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = keyslot(key)
        return self._connections(self._client.nodes_manager.get_node_from_slot(slot))

    def refresh(self) -> None:
        """Read the topology again (after a node failed us outside the cluster client: it would not
        know); a failure is left for the next call through the cluster client to meet."""
        try:
            self._client.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException):
            pass

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Run ``commands``; their replies in order, an error reply as a ``redis.ResponseError`` in its
        place (connection errors and timeouts raise, after the cluster client's retries).

        While the cluster moves the namespace's slot, a call the source sends on (``ASK``) can meet
        the target before the slot is handed over, and the script's first undeclared key is refused
        there (:func:`moving`); the scripts read before they write, so nothing was written and the
        call is sent again, with backoff, for up to :data:`MOVING_PATIENCE` seconds.

        A call ending in ``WAIT`` goes to :meth:`_waited`."""
        if commands[-1][0] == "WAIT":
            return self._waited(commands)
        replies = self._execute(commands)
        patience = _Patience()
        while any(isinstance(reply, redis.ResponseError) and moving(reply) for reply in replies):
            if patience.over():
                break
            patience.pause()  # waiting for the operator's tool to finish moving the slot
            replies = self._through_client(commands)
        return replies

    def _execute(self, commands: Sequence[Command]) -> list[Any]:
        try:
            conns = self._routed(commands)
        except RedisClusterException:  # no node for the slot in the table: let redis-py find one
            conns = None
        if conns is not None:
            try:
                replies = conns.execute(commands)
            except (redis.ConnectionError, redis.TimeoutError):
                pass  # the node may be gone: the cluster client refreshes the topology and retries
            else:
                if not any(isinstance(reply, redis.ResponseError) and _redirected(reply) for reply in replies):
                    return replies
        return self._through_client(commands)

    def _through_client(self, commands: Sequence[Command]) -> list[Any]:
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(self._client.execute_command(*command))  # type: ignore[no-untyped-call]
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def _waited(self, commands: Sequence[Command]) -> list[Any]:
        """``execute`` for a script followed by ``WAIT``: always on one connection of the node that runs
        the script. A redirect is followed here (``MOVED`` updates redis-py's slot table, ``ASK`` is
        sent on with ``ASKING``); a node that cannot be reached, a slot no node serves yet or a refusal
        to run (``TRYAGAIN``, ``CLUSTERDOWN``, mid-migration) refreshes the topology and sends again,
        with backoff, for up to :data:`MOVING_PATIENCE` seconds (a failover takes about twice the
        cluster's ``cluster-node-timeout``); then the last error is raised or returned. A redirect or
        a refusal means the node ran nothing of the script; a connection lost mid-call is sent again,
        as the cluster client's own retries do."""
        patience = _Patience()
        manager = self._client.nodes_manager
        followed = False  # a MOVED after the first: the slot between two owners (in_limbo), wait
        while True:
            try:
                conns = self._routed(commands)
                if conns is None:
                    raise RedisClusterException(f"no key to route {commands[-2][0]} by")
                replies = conns.execute(commands)
                redirect = next((r for r in replies if isinstance(r, AskError)), None)
                if redirect is not None and not isinstance(redirect, MovedError):
                    node = manager.get_node(host=redirect.host, port=redirect.port)
                    if node is not None:  # the slot is moving: the target runs it once told ASKING
                        replies = self._connections(node).execute([("ASKING",), *commands])[1:]
                if not any(isinstance(r, redis.ResponseError) and (_redirected(r) or moving(r)) for r in replies):
                    return replies
                if patience.over():
                    return replies
                moved = next((r for r in replies if isinstance(r, MovedError)), None)
                if moved is not None:
                    manager.move_slot(moved)  # the same update redis-py makes on a MOVED
                    if not followed:
                        followed = True
                        continue
            except (redis.ConnectionError, RedisClusterException):
                if patience.over():
                    raise
                try:
                    manager.initialize()
                except (redis.ConnectionError, RedisClusterException):
                    pass  # no node answered yet: try again after the pause
            patience.pause()  # the cluster is electing a new master or moving the slot

    def execute_apart(self, commands: Sequence[Command]) -> list[Any]:
        """Run ``commands`` (``FCALL``s, each of its own slot): each sent to the master serving it
        before any reply is read, so the masters run them at once; their replies in order, as
        :meth:`execute` gives them. One whose node could not be reached, redirected it or refused it
        mid-migration goes again through :meth:`execute` (so each must be a call that answers a
        second send as its first: a token's, ``scripts.TOKENED``)."""
        flights: list[tuple[Connections, AbstractConnection] | None] = []
        try:
            for command in commands:  # each kept as sent: an exception must find it
                flights.append(self._send(command))  # noqa: PERF401
            replies: list[Any] = []
            for place, command in enumerate(commands):
                flight, flights[place] = flights[place], None
                reply: Any = None
                if flight is not None:
                    try:
                        reply = flight[0].read(flight[1])
                    except (redis.ConnectionError, redis.TimeoutError):
                        flight = None
                if flight is None or (isinstance(reply, redis.ResponseError) and (_redirected(reply) or moving(reply))):
                    reply = self.execute([command])[0]
                replies.append(reply)
            return replies
        finally:
            for flight in flights:  # left unread by an exception: nothing unread may stay on them
                if flight is not None:
                    flight[1].disconnect()  # type: ignore[no-untyped-call]
                    flight[0].give(flight[1])

    def _send(self, command: Command) -> tuple[Connections, AbstractConnection] | None:
        """``command`` sent on a connection of the master redis-py's slot table names: it and its
        connection, or None when there is no such master or the send failed."""
        try:
            conns = self._routed([command])
            return None if conns is None else (conns, conns.send(command))
        except (RedisClusterException, redis.ConnectionError, redis.TimeoutError):
            return None

    def execute_each(self, commands: Iterator[Command], handle: Callable[[Command, Any], None]) -> None:
        """Run ``commands`` one after another, ``handle(command, reply)`` after each (an exception
        from it stops the rest unsent)."""
        for command in commands:
            handle(command, self.execute([command])[0])

    def close(self) -> None:
        """Disconnect the fast path's connections (the cluster client's pools close with the client)."""
        with self._lock:
            sets = list(self._nodes.values())
        for conns in sets:
            conns.close()


def moving(reply: redis.ResponseError) -> bool:
    """True for a script refused because its slot is being moved between nodes (Valkey and Redis 7
    word it differently; both say "non local key")."""
    return "non local key" in str(reply)


def in_limbo(exc: ClusterError) -> bool:
    """True for redis-py giving up on a command redirected back and forth (``TTL exhausted``): each
    redirect means a node ran nothing of it. The operator's tool tells the nodes a slot's new owner
    one after another; a source told first sends a call to the target, which, still importing the
    slot, sends it back until told it owns it."""
    return not isinstance(exc, redis.ResponseError)


def _redirected(reply: redis.ResponseError) -> bool:
    """True for the replies of a node that did not run the command, because another should (redis-py
    parses them into these classes, the ``MOVED``/``ASK`` word taken off the message)."""
    return isinstance(reply, (AskError, TryAgainError, ClusterDownError))


def is_cluster_node(client: redis.Redis) -> bool:
    """True if the server ``client`` talks to is a node of a Redis Cluster (``INFO cluster``).

    A user the ACL forbids ``INFO`` (it is in ``@dangerous``; ``faults.NEEDED_ACL`` does not grant it)
    is taken to be on one server: on a cluster it names the cluster with ``redis+cluster://``."""
    try:
        info: dict[str, Any] = client.info("cluster")
    except redis.exceptions.NoPermissionError:
        return False
    return str(info.get("cluster_enabled", "0")) == "1"
