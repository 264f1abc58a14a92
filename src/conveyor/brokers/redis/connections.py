"""``Connections``: the broker's hot-path connections, handed out without redis-py's pool bookkeeping.

Every broker operation is one ``FCALL`` (or a blocking pop with an ``FCALL`` queued behind it), sent
and read on one connection. redis-py 8's ``ConnectionPool`` costs about as much per checkout as the
server's whole work for a small call (a readability poll of the socket and metrics bookkeeping on
every get and release; docs/performance-notes.md), so the broker keeps its
own stack of idle connections: taking one is a ``list.pop`` and returning one a ``list.append``
(atomic under the GIL, so no lock).

The connections themselves are redis-py's (``client.connection_pool``'s class and settings: TLS for
``rediss://``, the hiredis parser, timeouts, the client's ``Retry`` with a disconnect before each
retry). A connection whose call failed in any way is disconnected before it goes back, so no reply
can be left unread on it; it reconnects on its next use. After a fork the child drops the parent's
connections (they share sockets) and makes its own. Redis-py's own client still serves the cold
paths (pipelines of plain reads, pub/sub, configuration).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import redis
from redis.connection import AbstractConnection

_pack_command: Callable[[tuple[Arg, ...]], bytes] | None
try:  # the C packer redis-py itself uses when hiredis is installed, without its per-argument Python loop
    import hiredis

    _pack_command = cast("Callable[[tuple[Arg, ...]], bytes]", hiredis.pack_command)
except ImportError:  # pragma: no cover - hiredis is a dependency
    _pack_command = None

__all__ = ["Arg", "Command", "Connections"]

Arg = str | int | float
Command = tuple[Arg, ...]


def _pack(conn: AbstractConnection, command: Command) -> bytes:
    if _pack_command is not None:
        return _pack_command(tuple(command))
    return b"".join(conn.pack_command(*command))  # type: ignore[no-untyped-call]  # pragma: no cover


class Connections:
    """Up to ``pool.max_connections`` connections made like ``pool`` makes them."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._factory = pool.connection_class
        self._kwargs = dict(pool.connection_kwargs)
        self._limit = pool.max_connections
        self._idle: list[AbstractConnection] = []
        self._all: list[AbstractConnection] = []
        self._lock = threading.Lock()  # guards _all and the count only (cold: once per new connection)
        self._pid = os.getpid()

    def _new(self) -> AbstractConnection:
        with self._lock:
            if len(self._all) >= self._limit:
                raise redis.ConnectionError(f"Too many connections (max_connections={self._limit})")
            conn = cast("AbstractConnection", self._factory(**self._kwargs))
            self._all.append(conn)
            return conn

    def _take(self) -> AbstractConnection:
        """An idle connection, or a new one (after a fork: never one of the parent's)."""
        if os.getpid() != self._pid:
            self._new_process()
        try:
            return self._idle.pop()
        except IndexError:
            return self._new()

    def take(self) -> AbstractConnection:
        """A connection for a caller that sends and reads on it itself (``slotwaits.py``); it goes
        back by :meth:`give`, with every reply read, or disconnected."""
        return self._take()

    def give(self, conn: AbstractConnection) -> None:
        self._idle.append(conn)

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write on one connection and return their replies in order.

        An error reply is returned in its place as a ``redis.ResponseError`` (every reply is read, so
        the connection stays in step); connection errors and timeouts raise after the client's retries.
        """
        conn = self._take()
        packed = [_pack(conn, command) for command in commands]

        def roundtrip() -> list[Any]:
            conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies

        try:
            replies: list[Any] = conn.retry.call_with_retry(roundtrip, lambda _error: conn.disconnect())  # type: ignore[no-untyped-call]
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]  # whatever happened, nothing unread may stay on it
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return replies

    def send(self, command: Command) -> AbstractConnection:
        """Send ``command`` on a connection taken for it, whose reply the caller reads later with
        :meth:`read` (so that calls to several servers run at once: ``ClusterCalls.execute_apart``).
        Raises what sending raises, the connection disconnected and back."""
        conn = self._take()
        try:
            conn.send_packed_command([_pack(conn, command)])  # type: ignore[no-untyped-call]
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            self._idle.append(conn)
            raise
        return conn

    def read(self, conn: AbstractConnection) -> Any:
        """The reply of the command :meth:`send` sent on ``conn`` (an error reply returned as a
        ``redis.ResponseError``); ``conn`` goes back, disconnected first if reading failed (raised)."""
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:
            reply = exc
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return reply

    def execute_each(self, commands: Iterator[Command], handle: Callable[[Command, Any], None]) -> None:
        """Run ``commands`` one after another, each sent once the last was handled: ``handle(command, reply)``.

        The next command is taken from the iterator while the server runs the current one, so making
        it (encoding a chunk of tasks) costs no time; it is sent only after ``handle`` has returned for
        the one before, and an exception from ``handle`` stops the rest unsent (``handle`` runs with the
        connection back in the idle stack, in step). An exception while making the next command
        disconnects the connection, the current reply unread. Error replies come to
        ``handle`` as ``redis.ResponseError``; a connection error or timeout sends the command again
        through :meth:`execute` (a new connection, the client's retries), as any call is retried.
        """
        command = next(commands, None)
        while command is not None:
            conn = self._take()
            reply: Any = None
            failed = False
            try:
                conn.send_packed_command([_pack(conn, command)])  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, redis.TimeoutError):
                failed = True
            except BaseException:  # e.g. a TLS misconfiguration (not retried): the connection goes back
                conn.disconnect()  # type: ignore[no-untyped-call]
                self._idle.append(conn)
                raise
            try:
                following = next(commands, None)  # made while the server works
                if not failed:
                    try:
                        reply = conn.read_response()
                    except redis.ResponseError as exc:
                        reply = exc
                    except (redis.ConnectionError, redis.TimeoutError):
                        failed = True
            except BaseException:
                conn.disconnect()  # type: ignore[no-untyped-call]
                self._idle.append(conn)
                raise
            if failed:  # its reply was not read: drop the connection, send the command again
                conn.disconnect()  # type: ignore[no-untyped-call]
                self._idle.append(conn)
                reply = self.execute([command])[0]
            else:
                self._idle.append(conn)
            handle(command, reply)
            command = following

    def _new_process(self) -> None:
        """A forked child: the parent's sockets are not ours to use (nor to close)."""
        with self._lock:
            if os.getpid() != self._pid:
                self._pid = os.getpid()
                self._idle, self._all = [], []

    def close(self) -> None:
        """Disconnect every connection (they reconnect if used again)."""
        with self._lock:
            conns = list(self._all)
        for conn in conns:
            conn.disconnect()  # type: ignore[no-untyped-call]
