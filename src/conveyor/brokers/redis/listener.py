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
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import RedisClusterException

from conveyor.brokers.redis.keys import Slot
from conveyor.errors import ConveyorError

__all__ = ["REFRESH", "Listener", "follow_now"]

log = logging.getLogger("conveyor.brokers.redis")

#: Seconds between two reads of the queue slots to listen to (events renew their ``listening`` keys then).
REFRESH = 2.0

#: Longest wait for a message before the thread looks at its stop flag and its refresh time again.
_POLL = 0.1


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

    def start(self) -> bool:
        """Start the thread if it is not running (and the listener not closed); wait until it is
        subscribed, at most ``ready_timeout`` seconds. False if it was not ready by then."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._listen, name=f"conveyor-redis-{self._what}", daemon=True)
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
        if thread is not None:
            thread.join(timeout=5.0)

    def _listen(self) -> None:
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
                    self._follow(pubsub, slots)
                    if self._tick is not None:
                        self._tick(slots)
                    refresh_at = time.monotonic() + REFRESH
                    self._ready.set()
                    with self._refreshed:
                        self._done = max(self._done, asked)
                        self._refreshed.notify_all()
                self._receive(_read(pubsub, _POLL))
                backoff = 0.05
            except (redis.RedisError, ConveyorError) as exc:
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

    def _follow(self, pubsub: redis.client.PubSub, slots: Sequence[Slot]) -> None:
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
            message = _read(pubsub, min(left, _POLL))
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
    :data:`REFRESH`). The wait is one turn of each thread, up to its poll of 0.1 s and a round trip."""
    tickets = [listener.ask() for listener in listeners]  # every thread at work before waiting on one
    deadline = time.monotonic() + timeout
    return all(
        listener.wait(ticket, max(0.0, deadline - time.monotonic()))
        for listener, ticket in zip(listeners, tickets, strict=True)
    )


def _read(pubsub: redis.client.PubSub, timeout: float) -> dict[str, Any] | None:
    """The next message of any subscribed channel, if one comes within ``timeout``.

    A cluster's shard messages come through ``get_sharded_message``, which reads the connection of each
    node serving a subscribed slot in turn, waiting ``timeout`` on each: with several nodes, a message
    on one would wait while the listener waits on another. So the nodes are read without waiting, and
    when none has a message the thread waits on all their sockets at once."""
    if not isinstance(pubsub, ClusterPubSub):
        message: dict[str, Any] | None = pubsub.get_message(timeout=timeout)
        return message
    nodes = list(pubsub.node_pubsub_mapping.values())
    if len(nodes) == 1:
        sharded: dict[str, Any] | None = pubsub.get_sharded_message(timeout=timeout)  # type: ignore[no-untyped-call]
        return sharded
    # (with no node yet, no queue: get_sharded_message would answer at once, _readable waits)
    sharded = pubsub.get_sharded_message(timeout=0.0) if nodes else None  # type: ignore[no-untyped-call]
    if sharded is None and _readable(nodes, timeout):
        sharded = pubsub.get_sharded_message(timeout=0.0)  # type: ignore[no-untyped-call]
    return sharded


def _readable(nodes: Sequence[redis.client.PubSub], timeout: float) -> bool:
    """Wait until the socket of one of ``nodes``' connections has data, at most ``timeout`` seconds.
    True at once when one has no socket: reading it then reconnects or raises (and the listener
    reconnects)."""
    socks = [sock for node in nodes if (sock := getattr(node.connection, "_sock", None)) is not None]
    if len(socks) < len(nodes) or any(isinstance(sock, ssl.SSLSocket) and sock.pending() for sock in socks):
        return True  # (TLS: bytes already decrypted wait in the socket object, where select cannot see them)
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(timeout))


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
