"""An idle ``conveyor worker`` stops at once on SIGTERM, not at the end of its fetcher's wait for work
(``InterruptsWaits``): a real process on SQLite, one Redis server and a 3-master cluster.

Its ``poll_interval`` is 30 s, the Redis URL lets a blocking pop last that long (``socket_timeout``),
and the services that write while it idles write once a minute, so nothing else ends its wait: a
worker that waited its wait out would take up to 30 s to exit; this one must exit within
:data:`PROMPT`, with status 0.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from conveyor import Conveyor, TaskState
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.sqlite.wake import wake_suffix
from conveyor.testing import poll_until

from .procs import Spawn, clean_env

pytestmark = pytest.mark.slow

#: Far below the 30 s an idle worker's wait lasts here, far above an exit (0.1-0.3 s on a quiet host).
PROMPT = 10.0

QUIET = {  # nothing written by the worker itself while it idles (a commit would end a SQLite wait)
    "CONVEYOR_WORKER_POLL_INTERVAL": "30",
    "CONVEYOR_WORKER_REGISTRY_INTERVAL": "60",
    "CONVEYOR_WORKER_REAPER_INTERVAL": "60",
    "CONVEYOR_WORKER_PROMOTER_INTERVAL": "60",
    "CONVEYOR_WORKER_SUMMARY_INTERVAL": "0",
}

APP = """
from conveyor import Conveyor, TaskState

app = Conveyor()  # CONVEYOR_URL


@app.task
def ok() -> None:
    pass
"""


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
    ]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stop.db'}"
    fixture = "redis_url" if request.param == "redis" else "redis_cluster_url"
    return str(request.getfixturevalue(fixture)) + "&socket_timeout=60"


def idle(url: str, since: float) -> bool:
    """Whether the worker waits for work: its blocking pop on the server (every master), or the FIFO its
    SQLite wait made beside the file."""
    if url.startswith("sqlite"):
        return Path(url.removeprefix("sqlite:///") + wake_suffix("default")).exists()
    return blocked(url) > since


def start_idle(url: str, tmp_path: Path, spawn: Spawn) -> subprocess.Popen[str]:
    """``conveyor worker`` on ``url``, once it waits for work."""
    (tmp_path / "stop_app.py").write_text(textwrap.dedent(APP))
    if url.startswith("sqlite"):  # a FIFO an earlier worker made stays
        Path(url.removeprefix("sqlite:///") + wake_suffix("default")).unlink(missing_ok=True)
    before = 0 if url.startswith("sqlite") else blocked(url)
    proc = spawn(["worker", "stop_app:app"], env={**clean_env(url), **QUIET}, cwd=tmp_path)
    poll_until(lambda: idle(url, before), timeout=30.0, interval=0.05, message="the worker to wait for work")
    return proc


def stop_promptly(proc: subprocess.Popen[str], what: str) -> str:
    """SIGTERM ``proc``, which must exit with status 0 within :data:`PROMPT`: its output, stderr last."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=PROMPT + 30.0) == 0
    took = time.monotonic() - sent
    assert took < PROMPT, f"{what} exited {took:.1f} s after SIGTERM"
    out, errors = proc.communicate()
    return out + errors


def test_an_idle_worker_exits_at_once_on_sigterm(url: str, tmp_path: Path, spawn: Spawn) -> None:
    proc = start_idle(url, tmp_path, spawn)
    assert "stopped" in stop_promptly(proc, "the idle worker")


def blocked(url: str) -> int:
    """Clients blocked in a pop on the server of ``url`` (every master of a cluster)."""
    with Conveyor(url) as app:
        assert isinstance(app.broker, RedisBroker)
        client = app.broker.client
        nodes = (
            [client.get_redis_connection(node) for node in client.get_primaries()]
            if isinstance(client, RedisCluster)
            else [client]
        )
        return sum(int(node.info("clients")["blocked_clients"]) for node in nodes)


def test_a_task_enqueued_as_an_idle_worker_stops_ran_or_is_pending(url: str, tmp_path: Path, spawn: Spawn) -> None:
    """The task may come with the wake-up the interrupt raced: claimed, it is run or released as the
    worker stops; never held by a claim whose reply nobody read (it would wait out its lease)."""
    with Conveyor(url) as producer:
        for _ in range(3):
            proc = start_idle(url, tmp_path, spawn)
            handle = producer.enqueue("ok")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=PROMPT + 30.0) == 0
            state = producer.get(handle.id).state
            assert state in (TaskState.COMPLETED, TaskState.PENDING), state


STUBBORN = """
import time
from conveyor import Conveyor

app = Conveyor()  # CONVEYOR_URL


@app.task
def stubborn() -> None:
    time.sleep(60)  # past any grace: it never looks at ctx.cancelled
"""


@pytest.mark.parametrize("given", ["options", "variables"])
def test_grace_and_lease_given_on_the_command_line_hold(url: str, given: str, tmp_path: Path, spawn: Spawn) -> None:
    """``conveyor worker --grace 0.5 --lease 90 --prefetch 0`` (or the variables named after those
    options): the running task holds a 90 s lease, and SIGTERM gives it half a second before it goes
    back to pending, untouched (its attempt given back). A misspelt variable is named in a warning."""
    (tmp_path / "grace_app.py").write_text(textwrap.dedent(STUBBORN))
    settings = {"grace": "0.5", "lease": "90", "prefetch": "0"}
    argv, env = ["worker", "grace_app:app"], clean_env(url)
    if given == "options":
        argv += [item for name, value in settings.items() for item in (f"--{name}", value)]
    else:
        env.update({f"CONVEYOR_WORKER_{name.upper()}": value for name, value in settings.items()})
        env["CONVEYOR_WORKER_CONCURENCY"] = "2"
    proc = spawn(argv, env=env, cwd=tmp_path)
    with Conveyor(url) as app:
        task_id = app.enqueue("stubborn").id
        poll_until(lambda: app.get(task_id).state is TaskState.ACTIVE, timeout=30.0, message="the task to start")
        running = app.get(task_id)
        assert running.lease_expires_at is not None and running.started_at is not None
        assert 85 <= running.lease_expires_at - running.started_at <= 90, running
        output = stop_promptly(proc, "the worker with a grace of 0.5 s")
        assert "shutting down (grace 0.5 s)" in output and "released 1 task(s) back to pending" in output, output
        misspelt = "warning: CONVEYOR_WORKER_CONCURENCY is ignored: no worker setting reads it (did you mean"
        assert (misspelt in output) == (given == "variables"), output
        back = app.get(task_id)
        assert (back.state, back.attempts) == (TaskState.PENDING, 0)


LINGERING_APP = """
import threading
import time

from conveyor import Conveyor

app = Conveyor()  # CONVEYOR_URL


@app.task
def spawns() -> None:
    threading.Thread(target=time.sleep, args=(60,), name="left-behind", daemon=False).start()
"""


@pytest.mark.parametrize("processes", [0, 1])
def test_a_thread_a_task_left_running_does_not_hold_the_worker_after_it_stopped(
    tmp_path: Path, spawn: Spawn, processes: int
) -> None:
    """Python's exit waits for every non-daemon thread: a handler's would keep the stopped worker
    (and a ``-p`` supervisor waiting on its child) alive until SIGKILL. It is named and left."""
    url = f"sqlite:///{tmp_path / 'linger.db'}"
    (tmp_path / "linger_app.py").write_text(textwrap.dedent(LINGERING_APP))
    with Conveyor(url) as producer:
        handle = producer.enqueue("spawns")
        args = ["worker", "linger_app:app"] + (["-p", str(processes)] if processes else [])
        proc = spawn(args, env=clean_env(url), cwd=tmp_path)
        poll_until(lambda: producer.get(handle.id).state is TaskState.COMPLETED, timeout=30.0, message="the task")
    output = stop_promptly(proc, "the worker whose task left a thread")
    assert "1 thread(s) started by tasks still run (left-behind): exiting without waiting for them" in output
