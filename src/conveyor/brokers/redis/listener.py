"""The shard channel of every queue slot, listened to by a thread of its own, started by the first
callback that needs it.

The scripts ``SPUBLISH`` (sharded pub/sub, Redis 7+) on a channel of the queue slot they ran in: a
message goes only to the nodes serving that slot (the channel carries its hash tag), not over the whole
cluster bus as a plain ``PUBLISH`` would; on one server it works as plain pub/sub does. In layout 4
every queue shares the namespace's slot, so a listener holds one subscription; with a slot per queue
(layout 5, docs/architecture.md) it ``SSUBSCRIBE``\\ s to the channel of each registered queue's slot,
reading the registry again every :data:`REFRESH` seconds to pick up queues registered since (and to
leave the slots of queues forgotten). On a cluster it subscribes through redis-py's ``ClusterPubSub``,
which keeps one connection per node serving a subscribed slot and moves a subscription when its slot
moves; a failed node is a lost connection, after which the listener subscribes again on the new owner.

Events (``events.py``) and cancel announcements (``cancels.py``) both need the same machinery: a
thread with its own pub/sub connections, reconnecting with backoff after a ``RedisError`` (pub/sub is
at-most-once: what is published meanwhile is missed), a caller that waits until it is subscribed,
and a ``close`` that stops the thread. They differ only in the channel and what a message means, and
events also keep a key of each slot alive while they listen (``tick``).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import AskError, ClusterDownError, RedisClusterException, TryAgainError

from conveyor.brokers.redis.keys import Slot
from conveyor.errors import ConveyorError

__all__ = ["REFRESH", "Listener", "follow_now"]

log = logging.getLogger("conveyor.brokers.redis")

#: Seconds between two reads of the queue slots to listen to (events renew their ``listening`` keys then).
REFRESH = 2.0

#: Longest wait for a message before the thread looks at its stop flag and its refresh time again.
_POLL = 0.1

#: Seconds a message whose first bytes have come is given to come whole.
_WHOLE = 2.0


class Listener:
    """A thread that calls ``on_message(data)`` for every message on ``channel(slot)`` of every queue
    slot that ``slots()`` names.

    ``client()`` gives the client to subscribe with (the broker's, chosen at its first use). ``slots()``
    is read when the listener (re)connects and then every :data:`REFRESH` seconds; in layout 4 it
    names the one slot without a round trip. ``tick(slots)``, if given, runs after each read, once the
    new subscriptions are confirmed; a ``RedisError`` from either reconnects like one from the
    connection. The listener reports itself ready after its first subscriptions and tick. :meth:`ask`
    makes it read ``slots()`` again at its next turn instead (:func:`follow_now`).
    """

    def __init__(
        self,
        client: Callable[[], redis.Redis],
        slots: Callable[[], Sequence[Slot]],
        channel: Callable[[Slot], str],
        ready_timeout: float,
        on_message: Callable[[str], None],
        *,
        what: str,
        tick: Callable[[Sequence[Slot]], None] | None = None,
    ) -> None:
        self._client = client
        self._slots = slots
        self._channel = channel
        self._ready_timeout = ready_timeout
        self._on_message = on_message
        self._what = what  # names the thread and the log lines: "events", "cancels"
        self._tick = tick
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._channels: set[str] = set()  # subscribed on the current connection (the thread's own)
        self._asked = 0  # refreshes asked for (``ask``) and the last asked one done before a read began
        self._done = 0
        self._refreshed = threading.Condition(self._lock)
        # rung by ask() and close(): the thread waits on it beside its sockets, so neither waits a poll
        self._bell: tuple[socket.socket, socket.socket] | None = None  # (the thread's end, the ringing end)

    def start(self) -> bool:
        """Start the thread if it is not running (and the listener not closed); wait until it is
        subscribed, at most ``ready_timeout`` seconds. False if it was not ready by then."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._bell = socket.socketpair()
                for end in self._bell:
                    end.setblocking(False)
                self._thread = threading.Thread(
                    target=self._listen, args=(self._bell[0],), name=f"conveyor-redis-{self._what}", daemon=True
                )
                self._thread.start()
        return self._ready.wait(self._ready_timeout)

    def ask(self) -> int | None:
        """Ask the thread to read ``slots()`` again now rather than at its next refresh: a ticket for
        :meth:`wait`, or None when there is nothing to wait for (no thread: it reads them when it
        starts; or this is the thread itself, a message's callback, which must not wait on itself)."""
        with self._lock:
            thread = self._thread
            if thread is None or thread is threading.current_thread():
                return None
            self._asked += 1
            _ring(self._bell)
            return self._asked

    def wait(self, ticket: int | None, timeout: float) -> bool:
        """Wait until a read of ``slots()`` that began after :meth:`ask` gave ``ticket`` has its
        subscriptions confirmed (and ``tick`` run), at most ``timeout`` seconds: False if not by then."""
        if ticket is None:
            return True
        with self._refreshed:
            return self._refreshed.wait_for(lambda: self._done >= ticket or self._stop.is_set(), timeout)

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            self._refreshed.notify_all()
            thread, self._thread = self._thread, None
            bell, self._bell = self._bell, None
            _ring(bell)
        if thread is not None:
            thread.join(timeout=5.0)
        if bell is not None and not (thread is not None and thread.is_alive()):
            for end in bell:
                end.close()

    def _listen(self, bell: socket.socket) -> None:
        backoff, refresh_at = 0.05, 0.0
        pubsub = None
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._client().pubsub()  # type: ignore[no-untyped-call]
                    self._channels, refresh_at = set(), 0.0
                asked = self._asked  # (read unlocked: a newer ask is seen at the next turn)
                if time.monotonic() >= refresh_at or asked > self._done:
                    slots = self._slots()
                    self._follow(pubsub, slots, bell)
                    if self._tick is not None:
                        self._tick(slots)
                    refresh_at = time.monotonic() + REFRESH
                    self._ready.set()
                    with self._refreshed:
                        self._done = max(self._done, asked)
                        self._refreshed.notify_all()
                self._receive(_read(pubsub, _POLL, bell))
                backoff = 0.05
            except (_SlotLeft, redis.RedisError, ConveyorError) as exc:
                if isinstance(exc, (_SlotLeft, AskError, TryAgainError, ClusterDownError)):
                    # a reshard: routine, and the node is not lost (what is published meanwhile is missed)
                    log.info("%s listener: a slot it listens to moved (%s); subscribing again", self._what, exc)
                else:
                    log.warning("%s listener lost its connection (%s); reconnecting in %.2fs", self._what, exc, backoff)
                _close_quietly(pubsub)
                pubsub = None
                _refresh_topology(self._client)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                log.exception("%s listener failed; going on in %.2fs", self._what, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        _close_quietly(pubsub)

    def _follow(self, pubsub: redis.client.PubSub, slots: Sequence[Slot], bell: socket.socket) -> None:
        """Subscribe to the channels of ``slots`` not subscribed yet and wait for their confirmations
        (at most ``ready_timeout``), so a script that finds the ``listening`` key set afterwards
        publishes to a subscribed listener; leave the channels of slots no longer named."""
        wanted = {self._channel(slot) for slot in slots}
        pending = wanted - self._channels
        for channel in sorted(pending):  # one command per channel: each is a slot of its own
            pubsub.ssubscribe(channel)
        for channel in sorted(self._channels - wanted):
            pubsub.sunsubscribe(channel)  # type: ignore[no-untyped-call]
        self._channels = wanted
        deadline = time.monotonic() + self._ready_timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("%s listener: no confirmation yet for %s", self._what, sorted(pending))
                return
            message = _read(pubsub, min(left, _POLL), bell)
            if message is not None and message.get("type") == "ssubscribe":
                pending.discard(message["channel"])
            self._receive(message)

    def _receive(self, message: dict[str, Any] | None) -> None:
        if message is None or message.get("type") != "smessage":
            return  # nothing, or the confirmation of a (un)subscription
        try:
            self._on_message(message["data"])
        except Exception:
            log.exception("%s listener failed on a message; going on", self._what)


def follow_now(listeners: Sequence[Listener], timeout: float) -> bool:
    """Have every running one of ``listeners`` read its slots again at once and wait until all have
    (at most ``timeout`` seconds; False if some had not by then): after this process registered a
    queue, so that it hears every event and cancel of it (other processes pick it up at their next
    :data:`REFRESH`). The wait is one turn of each thread, woken at once: a round trip or two."""
    tickets = [listener.ask() for listener in listeners]  # every thread at work before waiting on one
    deadline = time.monotonic() + timeout
    return all(
        listener.wait(ticket, max(0.0, deadline - time.monotonic()))
        for listener, ticket in zip(listeners, tickets, strict=True)
    )


def _read(pubsub: redis.client.PubSub, timeout: float, bell: socket.socket) -> dict[str, Any] | None:
    """The next message of any subscribed channel, if one comes within ``timeout`` and ``bell`` is not
    rung before (None then: the caller looks at what it was rung for).

    The connections serving subscribed channels (one on one server, one per node serving a subscribed
    slot on a cluster) are looked at without reading; when none has anything, the thread waits on all
    their sockets and the bell at once (``get_sharded_message`` would wait on each node in turn). A
    connection is read only once it has something, and then given :data:`_WHOLE` for the rest: a
    select sees a reply's or a TLS record's first bytes, and a read that did not wait would take one
    split over two TCP segments for a lost connection."""
    nodes = _connections(pubsub)
    for name, node in nodes:
        if node.connection is None:  # (a cluster node's: its subscriptions' slot left it, see _SlotLeft)
            raise _SlotLeft(f"{name} no longer holds a subscription")
        node.check_health()  # (a PING when idle past the interval: a read would send it, a wait does not)
    ready = _with_data(nodes)
    if not ready:
        _wait(nodes, timeout, bell)
        ready = _with_data(nodes)
    for name, node in ready:
        message: dict[str, Any] | None
        if isinstance(pubsub, ClusterPubSub):
            # (through the cluster's pub/sub, which keeps its books on (un)subscriptions and moved slots)
            target = pubsub.cluster.get_node(node_name=name) or _Named(name)
            try:
                message = pubsub.get_sharded_message(timeout=_WHOLE, target_node=target)  # type: ignore[no-untyped-call]
            except (IndexError, TypeError) as exc:  # a reply redis-py's pub/sub cannot parse as a message
                raise _SlotLeft(f"{name}: {exc!r}") from exc
        else:
            message = node.get_message(timeout=_WHOLE)
        if message is not None:
            return message
    return None


def _connections(pubsub: redis.client.PubSub) -> list[tuple[str, redis.client.PubSub]]:
    """The pub/sub connections of ``pubsub`` by node name: none before a first subscription."""
    if isinstance(pubsub, ClusterPubSub):
        return list(pubsub.node_pubsub_mapping.items())
    return [("", pubsub)] if pubsub.connection is not None else []


def _with_data(nodes: Sequence[tuple[str, redis.client.PubSub]]) -> list[tuple[str, redis.client.PubSub]]:
    """Those of ``nodes`` whose connection holds or can read something now (without reading a
    message); one with no socket too: reading it then reconnects or raises (and the listener
    reconnects). Every one has a connection (``_read`` raised for one without)."""
    return [(name, node) for name, node in nodes if _has_data(node)]


def _has_data(node: redis.client.PubSub) -> bool:
    connection = node.connection
    assert connection is not None  # (see _with_data)
    return getattr(connection, "_sock", None) is None or bool(connection.can_read(0))


def _wait(nodes: Sequence[tuple[str, redis.client.PubSub]], timeout: float, bell: socket.socket) -> None:
    """Wait until the socket of one of ``nodes``' connections has data or ``bell`` rings, at most
    ``timeout`` seconds (a ring is emptied)."""
    socks = [sock for _, node in nodes if (sock := getattr(node.connection, "_sock", None)) is not None]
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        selector.register(bell, selectors.EVENT_READ)
        ready = selector.select(timeout)
    if any(key.fileobj is bell for key, _ in ready):
        try:
            while bell.recv(64):
                pass
        except (BlockingIOError, OSError):
            pass  # emptied (or closed under a thread that outlived close(): it ends at its next turn)


class _SlotLeft(Exception):
    """The slot of a subscribed channel left its node (a reshard): the node unsubscribed the listener,
    and redis-py's cluster pub/sub, which follows only the unsubscriptions it asked for, either dropped
    that node's connection or failed to read the reply as a message. The listener subscribes afresh."""


class _Named:
    """A node known by name only (gone from the topology just now): all the cluster's pub/sub needs."""

    def __init__(self, name: str) -> None:
        self.name = name


def _ring(bell: tuple[socket.socket, socket.socket] | None) -> None:
    if bell is None:
        return
    try:
        bell[1].send(b"\0")
    except OSError:
        pass  # full (a ring is waiting already) or closed (the listener is closed)


def _refresh_topology(client: Callable[[], redis.Redis]) -> None:
    """On a cluster, read the topology again: the node serving a channel may have failed over, and a
    process that only listens makes no other call that would teach its client the new master."""
    try:
        cluster = client()
    except ConveyorError:
        return  # not connected yet: the next try connects
    if isinstance(cluster, RedisCluster):
        try:
            cluster.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException):
            log.debug("could not read the cluster's topology; trying again at the next reconnect", exc_info=True)


def _close_quietly(pubsub: redis.client.PubSub | None) -> None:
    if pubsub is None:
        return
    try:
        pubsub.close()
    except Exception:
        log.debug("closing the pub/sub connection failed", exc_info=True)
