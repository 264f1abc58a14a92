"""The private test server (``conveyor.testing.redis_server``) never outlives the process that started
it: a test run killed by SIGKILL (no exit hook runs) leaves no server behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from conveyor.testing import poll_until
from conveyor.testing.redis_server import find_server_binary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only"),
]

STARTER = """
import time
from conveyor.testing.redis_server import RedisServer

server = RedisServer().start()
print(server.pid, server.port, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead and not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def listening(port: int) -> bool:
    """True while something accepts connections on the loopback ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_server_stops_when_the_process_that_started_it_is_killed_with_sigkill() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    pid: int | None = None
    try:
        assert starter.stdout is not None
        pid, port = map(int, starter.stdout.readline().split())
        # the pid the server object reports is the server itself (stop() and kill() signal it)
        assert os.readlink(f"/proc/{pid}/exe") == os.path.realpath(find_server_binary())
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        assert client.ping()
        client.close()
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=10)
        dead = pid  # (a local the closure can rely on: pid is typed int | None)
        poll_until(lambda: not alive(dead), timeout=10, interval=0.05, message="the server to die with its starter")
        assert not listening(port)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        if starter.stdout is not None:
            starter.stdout.close()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the guard failed: do not leave it running
