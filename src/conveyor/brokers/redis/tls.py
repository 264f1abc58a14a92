"""``rediss://`` connections whose failures say what to fix, whatever the Python's TLS stack reports.

One mistake reaches redis-py as different errors by Python and OpenSSL version, and by timing: a
server that wants a client certificate completes the TLS 1.3 handshake and only then sends its
alert, which arrives as that alert (Python 3.11, mostly), an EOF, or a connection reset (3.13); a
plain-text server on a ``rediss://`` URL makes the handshake time out (it waits for a line) or fail
on a garbled record. So :class:`TlsConnection` judges by *where* a connection failed, not by the text
of the error, and raises :class:`TlsTrouble` with a one-line fix:

- the handshake fails verifying the server's certificate: it is not trusted (``ssl_ca_certs=``);
- the handshake fails otherwise, and the port answers a plain-text ``PING``: no TLS there;
- the handshake succeeds, then the server hangs up before its first reply: it wants a client
  certificate (``ssl_certfile=`` and ``ssl_keyfile=``), or another one than the one given.

The handshake is bounded by ``socket_connect_timeout`` (it is part of connecting), not by
``socket_timeout``. ``faults.py`` turns ``TlsTrouble`` into ``BrokerUnavailable`` with its message.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import redis

__all__ = ["TlsConnection", "TlsTrouble"]


class TlsTrouble(redis.RedisError):
    """A TLS connection failed for a reason the message names, with what to change.

    Not a ``redis.ConnectionError``, so redis-py does not retry it: the next attempt would meet the same
    settings (retried, a plain-text server's handshake timeouts would add up to many seconds).
    """


class TlsConnection(redis.SSLConnection):
    """redis-py's TLS connection, whose failures are :class:`TlsTrouble` where the cause is known."""

    _handshaken = False  # the current connection attempt got through the TLS handshake

    def _connect(self) -> socket.socket:
        self._handshaken = False
        sock: socket.socket = super()._connect()  # type: ignore[no-untyped-call]
        return sock

    def _wrap_socket_with_ssl(self, sock: socket.socket) -> ssl.SSLSocket:
        sock.settimeout(self.socket_connect_timeout or self.socket_timeout)
        try:
            wrapped: ssl.SSLSocket = super()._wrap_socket_with_ssl(sock)  # type: ignore[no-untyped-call]
        except ssl.SSLCertVerificationError as exc:
            raise TlsTrouble(
                "the TLS handshake with Redis failed: the server's certificate is not trusted; for a private CA"
                f" add ssl_ca_certs=/path/to/ca.pem to the rediss:// URL ({exc.verify_message})"
            ) from exc
        except OSError as exc:  # a timeout, an SSL error, an EOF or a reset, by Python version and timing
            if _answers_plain_text(self.host, self.port, self.socket_connect_timeout or self.socket_timeout):
                raise TlsTrouble(
                    f"the Redis server at {self.host}:{self.port} answers in plain text, not TLS: use a redis://"
                    " URL for it, or the port where it serves TLS (tls-port) with rediss://"
                ) from exc
            raise
        wrapped.settimeout(self.socket_timeout)
        self._handshaken = True
        return wrapped

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        """Every path to a connected socket in redis-py 6+ (``connect()`` and the first command) comes here."""
        try:
            super().connect_check_health(*args, **kwargs)
        except (TlsTrouble, redis.AuthenticationError):
            raise
        except redis.ConnectionError as exc:
            if self._handshaken and _hung_up(exc):
                raise TlsTrouble(_rejected_client(self.certfile, exc)) from exc
            raise


def _hung_up(exc: redis.ConnectionError) -> bool:
    """The server closed or reset the connection (rather than sending an error reply)."""
    return isinstance(exc.__context__, OSError) or "closed by server" in str(exc).lower()


def _rejected_client(certfile: str | None, exc: BaseException) -> str:
    closed = "the Redis server closed the TLS connection right after the handshake"
    if certfile is None:
        return (
            f"{closed}: it asks for a client certificate; add ssl_certfile= and ssl_keyfile= (the client's"
            f" certificate and key) to the rediss:// URL ({exc})"
        )
    return (
        f"{closed}: it did not accept the client certificate ssl_certfile={certfile}; give one signed by a CA"
        f" the server trusts (its tls-ca-cert-file) ({exc})"
    )


def _answers_plain_text(host: str, port: int, timeout: float | None) -> bool:
    """Does ``host:port`` answer a plain-text ``PING`` as a Redis server does (``+PONG`` or an error reply)?"""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+", b"-")) and reply.endswith(b"\r\n")
