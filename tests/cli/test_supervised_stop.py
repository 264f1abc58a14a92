"""``conveyor worker -p N`` stopped as a service manager and an operator stop it (real processes, SQLite):
systemd's default ``KillMode=control-group`` sends SIGTERM to the supervisor and every child at once,
and the dashboard's Stop reaches one child. Every process is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState
from conveyor.testing import poll_until

from .procs import Spawn, clean_env

pytestmark = pytest.mark.slow

APP = """
import time
from conveyor import Conveyor

app = Conveyor()  # CONVEYOR_URL


@app.task
def slow() -> str:
    time.sleep(2.0)
    return "done"
"""


def start(tmp_path: Path, spawn: Spawn, url: str) -> subprocess.Popen[str]:
    """``conveyor worker -p 2 -c 1`` once both children serve."""
    (tmp_path / "supervised_app.py").write_text(textwrap.dedent(APP))
    argv = ["worker", "supervised_app:app", "-p", "2", "-c", "1", "--grace", "20", "--prefetch", "0"]
    proc = spawn(argv, env={**clean_env(url), "CONVEYOR_WORKER_REGISTRY_INTERVAL": "0.2"}, cwd=tmp_path)
    with Conveyor(url) as app:
        poll_until(lambda: len(app.inspect.workers()) == 2, timeout=30.0, message="both children to serve")
    return proc


def test_sigterm_to_the_whole_group_gives_running_tasks_their_grace(tmp_path: Path, spawn: Spawn) -> None:
    """Each child had SIGTERM twice (systemd's and the supervisor's forwarded one) and took the second
    as "exit now": its running task was released mid-flight instead of finishing within the grace."""
    url = f"sqlite:///{tmp_path / 'group.db'}"
    proc = start(tmp_path, spawn, url)
    with Conveyor(url) as app:
        handles = [app.enqueue("slow") for _ in range(2)]
        poll_until(
            lambda: all(app.get(h.id).state is TaskState.ACTIVE for h in handles),
            timeout=30.0,
            message="both tasks to run",
        )
        pids = [proc.pid, *(worker.pid for worker in app.inspect.workers())]
        for pid in pids:  # as KillMode=control-group does: every process of the unit at once
            os.kill(pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out, errors = proc.communicate()
        assert [app.get(h.id).state for h in handles] == [TaskState.COMPLETED] * 2, out + errors
    assert "exiting now" not in errors and "forced exit" not in errors, errors


def test_an_operator_stop_of_a_child_is_not_undone_by_the_supervisor(tmp_path: Path, spawn: Spawn) -> None:
    """The supervisor replaced a child the dashboard's Stop had stopped: a ``-p`` worker could not be
    stopped from the dashboard. Each child stopped stays stopped; with none left, the supervisor exits."""
    url = f"sqlite:///{tmp_path / 'operator.db'}"
    proc = start(tmp_path, spawn, url)
    with Conveyor(url) as app:
        first, second = app.inspect.workers()
        app.inspect.command_worker(first.id, "stop")
        poll_until(lambda: [w.id for w in app.inspect.workers()] == [second.id], timeout=30.0, message="one stopped")
        assert proc.poll() is None  # the other child still serves
        assert app.enqueue("slow").result(timeout=30) == "done"
        app.inspect.command_worker(second.id, "stop")
        assert proc.wait(timeout=30) == 0
    _, errors = proc.communicate()
    assert errors.count("stopped by an operator; not replaced") == 2, errors
    assert "replacing it" not in errors, errors


def signalled_twice(proc: subprocess.Popen[str], url: str) -> list[str]:
    """A running task, then SIGTERM twice to ``proc`` (the second once the first was taken: two sent at
    once may arrive as one), which must exit with status 1 and leave the task pending: its stderr."""
    with Conveyor(url) as app:
        handle = app.enqueue("slow")
        poll_until(lambda: app.get(handle.id).state is TaskState.ACTIVE, timeout=30.0, message="the task to run")
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGTERM)
        poll_until(lambda: any("shutting down" in line for line in lines), timeout=30.0, message="the first signal")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 1
        assert app.get(handle.id).state is TaskState.PENDING
        reader.join(timeout=10)
    return lines


def test_a_second_sigterm_to_the_supervisor_exits_now_with_status_1(tmp_path: Path, spawn: Spawn) -> None:
    """As one worker's second signal does: the children release what they hold and exit at once."""
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    lines = signalled_twice(start(tmp_path, spawn, url), url)
    assert any("released" in line and "forced" in line for line in lines), lines


def test_a_second_sigterm_to_one_worker_exits_now_with_status_1(tmp_path: Path, spawn: Spawn) -> None:
    """The forced exit's release runs off the signal handler, and the stopping main thread waits for
    it rather than ending the process with status 0 first."""
    url = f"sqlite:///{tmp_path / 'alone.db'}"
    (tmp_path / "supervised_app.py").write_text(textwrap.dedent(APP))
    argv = ["worker", "supervised_app:app", "-c", "1", "--grace", "20", "--prefetch", "0"]
    lines = signalled_twice(spawn(argv, env=clean_env(url), cwd=tmp_path), url)
    assert not any(line.endswith(" stopped\n") for line in lines), lines
