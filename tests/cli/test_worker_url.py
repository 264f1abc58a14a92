"""``conveyor --url URL worker APP``: the URL wins over the app's own broker, in every process."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState
from conveyor.testing import poll_until

from .procs import Spawn, clean_env

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


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize("via", ["--url", "CONVEYOR_URL"])
def test_worker_serves_the_broker_the_url_names(app_dir: Path, spawn: Spawn, processes: str, via: str) -> None:
    target = app_dir / "target.db"
    url = f"sqlite:///{target}"
    with Conveyor(url) as producer:
        producer.enqueue("add", [2, 3], task_id="sum")
    env = clean_env()
    args = ["worker", "url_tasks:app", "-p", processes]
    if via == "--url":
        args = ["--url", url, *args]
    else:
        env["CONVEYOR_URL"] = url
    proc = spawn(args, env=env, cwd=app_dir)
    with Conveyor(url) as app:
        poll_until(
            lambda: app.get("sum").state == TaskState.COMPLETED,
            timeout=20.0,
            interval=0.05,
            message="the task to run on target.db",
        )
        assert app.get("sum").result == 5
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[0] == f"worker url_tasks:app on {url}, queues default"
    with Conveyor("sqlite:///" + str(app_dir / "own.db")) as own:
        assert own.stats() == {}


def test_worker_start_line_masks_the_password(app_dir: Path, spawn: Spawn) -> None:
    url = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens on port 1: the worker keeps retrying
    proc = spawn(["--url", url, "worker", "url_tasks:app"], env=clean_env(), cwd=app_dir)
    assert proc.stderr is not None
    lines = [proc.stderr.readline() for _ in range(2)]  # the other: the server clock cannot be read
    assert "worker url_tasks:app on redis://:***@127.0.0.1:1/0, queues default\n" in lines
    assert not any("s3cret" in line for line in lines)
