"""``conveyor --url URL worker APP``: the URL wins over the app's own broker, in every process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState

from .test_processes import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A tasks module whose app names its own database, ``own.db``."""
    (tmp_path / "url_tasks.py").write_text(
        textwrap.dedent(
            """
            from conveyor import Conveyor

            app = Conveyor("sqlite:///own.db")

            @app.task
            def add(a: int, b: int) -> int:
                return a + b
            """
        )
    )
    return tmp_path


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "conveyor", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize("via", ["--url", "CONVEYOR_URL"])
def test_worker_serves_the_broker_the_url_names(
    app_dir: Path, workers: list[subprocess.Popen[str]], processes: str, via: str
) -> None:
    target = app_dir / "target.db"
    url = f"sqlite:///{target}"
    with Conveyor(url) as producer:
        producer.enqueue("add", [2, 3], task_id="sum")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    args = ["worker", "url_tasks:app", "-p", processes]
    if via == "--url":
        args = ["--url", url, *args]
    else:
        env["CONVEYOR_URL"] = url
    proc = start(args, app_dir, env)
    workers.append(proc)
    with Conveyor(url) as app:
        wait_for(lambda: app.get("sum").state == TaskState.COMPLETED, what="the task to run on target.db")
        assert app.get("sum").result == 5
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[0] == f"worker url_tasks:app on {url}, queues default"
    with Conveyor("sqlite:///" + str(app_dir / "own.db")) as own:
        assert own.stats() == {}


def test_worker_start_line_masks_the_password(app_dir: Path, workers: list[subprocess.Popen[str]]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    url = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens on port 1: the worker keeps retrying
    proc = start(["--url", url, "worker", "url_tasks:app"], app_dir, env)
    workers.append(proc)
    assert proc.stderr is not None
    lines = [proc.stderr.readline() for _ in range(2)]  # the other: the server clock cannot be read
    assert "worker url_tasks:app on redis://:***@127.0.0.1:1/0, queues default\n" in lines
    assert not any("s3cret" in line for line in lines)
