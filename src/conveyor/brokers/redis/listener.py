"""One shard channel listened to by a thread of its own, started by the first callback that needs it.

The scripts ``SPUBLISH`` (sharded pub/sub, Redis 7+): a message goes only to the nodes serving the
channel's slot, which is the namespace's (the channel carries its hash tag), not over the whole
cluster bus as a plain ``PUBLISH`` would; on one server it works as plain pub/sub does. On a cluster
the listener subscribes with ``SSUBSCRIBE`` through redis-py's ``ClusterPubSub``, on the node serving
the slot; redis-py moves the subscription when the slot moves, and a failed node is a lost
connection, after which the listener subscribes again on the new owner.

Events (``events.py``) and cancel announcements (``cancels.py``) both need the same machinery: a
thread with its own pub/sub connection, reconnecting with backoff after a ``RedisError`` (pub/sub is
at-most-once: what is published meanwhile is missed), a caller that waits until it is subscribed,
and a ``close`` that stops the thread. They differ only in what a message means, and events also
keep a key alive while they listen (``tick``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import RedisClusterException

__all__ = ["Listener"]

log = logging.getLogger("conveyor.brokers.redis")


class Listener:
    """A thread that calls ``on_message(data)`` for every message on ``channel``.

    ``client()`` gives the client to subscribe with (the broker's, chosen at its first use).

    ``tick(subscribed)``, if given, runs before every wait for a message (``subscribed``: the
    connection was just made); a ``RedisError`` from it reconnects like one from the connection. The
    listener reports itself ready after the first subscription and, if given, the first tick.
    """

    def __init__(
        self,
        client: Callable[[], redis.Redis],
        channel: str,
        ready_timeout: float,
        on_message: Callable[[str], None],
        *,
        what: str,
        tick: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = client
        self._channel = channel
        self._ready_timeout = ready_timeout
        self._on_message = on_message
        self._what = what  # names the thread and the log lines: "events", "cancels"
        self._tick = tick
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    def start(self) -> bool:
        """Start the thread if it is not running (and the listener not closed); wait until it is
        subscribed, at most ``ready_timeout`` seconds. False if it was not ready by then."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._listen, name=f"conveyor-redis-{self._what}", daemon=True)
                self._thread.start()
        return self._ready.wait(self._ready_timeout)

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5.0)

    def _listen(self) -> None:
        backoff = 0.05
        pubsub = None
        while not self._stop.is_set():
            try:
                subscribed = pubsub is None
                if pubsub is None:
                    pubsub = self._client().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                    pubsub.ssubscribe(self._channel)
                    _read(pubsub, self._ready_timeout)  # the subscribe confirmation
                if self._tick is not None:
                    self._tick(subscribed)
                self._ready.set()
                message = _read(pubsub, 0.1)
                if message is not None and message.get("type") == "smessage":
                    self._on_message(message["data"])
                backoff = 0.05
            except redis.RedisError as exc:
                log.warning("%s listener lost its connection (%s); reconnecting in %.2fs", self._what, exc, backoff)
                _close_quietly(pubsub)
                pubsub = None
                _refresh_topology(self._client())
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                log.exception("%s listener failed on a message; going on", self._what)
        _close_quietly(pubsub)


def _read(pubsub: redis.client.PubSub, timeout: float) -> dict[str, Any] | None:
    """The next message, if one comes within ``timeout`` (a cluster's shard messages come through
    ``get_sharded_message``, which reads the connection of the node serving the channel)."""
    if isinstance(pubsub, ClusterPubSub):
        sharded: dict[str, Any] | None = pubsub.get_sharded_message(timeout=timeout)  # type: ignore[no-untyped-call]
        return sharded
    message: dict[str, Any] | None = pubsub.get_message(timeout=timeout)
    return message


def _refresh_topology(client: redis.Redis) -> None:
    """On a cluster, read the topology again: the node serving the channel may have failed over, and a
    process that only listens makes no other call that would teach its client the new master."""
    if isinstance(client, RedisCluster):
        try:
            client.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException):
            log.debug("could not read the cluster's topology; trying again at the next reconnect", exc_info=True)


def _close_quietly(pubsub: redis.client.PubSub | None) -> None:
    if pubsub is None:
        return
    try:
        pubsub.close()
    except Exception:
        log.debug("closing the pub/sub connection failed", exc_info=True)
