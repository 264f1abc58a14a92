"""A TCP proxy in front of a real server that cuts a connection after the server has answered a chosen
command and before the client reads the answer: the connection lost mid-reply that makes a client
send the command again (``test_redis_resend.py``). Deterministic, unlike a ``CLIENT KILL`` timed from
another connection, and no mock: every command still runs on the real server. It can also deliver each
reply in two halves some time apart (:attr:`CuttingProxy.split`): a reply (or a TLS record) split over
two TCP segments, which a client must wait for rather than take for a broken connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

__all__ = ["CuttingProxy"]


class _Pair:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.doomed: Callable[[], object] | None = None  # set: the reply is dropped, this run first
        self.lock = threading.Lock()

    def close(self) -> None:
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class CuttingProxy:
    """Listens on 127.0.0.1 (:attr:`port`) and forwards each connection to ``host:port``.

    :meth:`cut_after` arms it: the next request holding ``marker`` is forwarded whole, and when the
    server's reply to it arrives the proxy closes both sockets instead of forwarding the reply, so the
    command has run on the server while its client learns only that the connection broke (``then``,
    if given, runs before the close: something done between the first send and the next)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._armed: list[tuple[bytes, Callable[[], object]]] = []  # the cuts still to make, in order
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self.cuts = 0  # replies dropped so far
        self.split = 0.0  # above 0: seconds between the two halves of every reply forwarded
        self.connections = 0  # client connections accepted so far
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="cutting-proxy").start()

    def cut_after(self, marker: bytes, times: int = 1, then: Callable[[], object] = lambda: None) -> None:
        """Drop the reply to each of the next ``times`` requests whose bytes hold ``marker`` (one cut each)."""
        with self._lock:
            self._armed += [(marker, then)] * times

    def disarm(self) -> None:
        """Drop the cuts not made yet."""
        with self._lock:
            self._armed.clear()

    @property
    def armed(self) -> int:
        """Cuts armed and not made yet."""
        with self._lock:
            return len(self._armed)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
                self.connections += 1
            threading.Thread(target=self._upstream, args=(pair,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(pair,), daemon=True).start()

    def _upstream(self, pair: _Pair) -> None:
        """Client to server: a request holding the armed marker dooms its reply (a request's bytes may
        arrive in several reads: the marker, a function name, comes in the first)."""
        while True:
            data = _received(pair.client)
            if not data:
                pair.close()
                return
            with self._lock:
                if self._armed and self._armed[0][0] in data:
                    _, then = self._armed.pop(0)
                    with pair.lock:
                        pair.doomed = then
            try:
                pair.server.sendall(data)
            except OSError:
                pair.close()
                return

    def _downstream(self, pair: _Pair) -> None:
        """Server to client, except the reply to a doomed request: the pair is closed instead."""
        while True:
            data = _received(pair.server)
            if not data:
                pair.close()
                return
            with pair.lock:
                then = pair.doomed
            if then is not None:
                then()
                self.cuts += 1
                pair.close()
                return
            try:
                if self.split > 0 and len(data) > 1:
                    pair.client.sendall(data[: len(data) // 2])
                    time.sleep(self.split)  # (the fault itself: the second half comes later)
                    data = data[len(data) // 2 :]
                pair.client.sendall(data)
            except OSError:
                pair.close()
                return

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _received(sock: socket.socket) -> bytes:
    """The next bytes from ``sock``; b"" once it is closed or broken."""
    try:
        return sock.recv(65536)
    except OSError:
        return b""
