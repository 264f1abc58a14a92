"""A running worker obeys an operator's ``quiet`` and ``stop`` within one registry beat."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState
from conveyor.testing import poll_until

from .conftest import Start


@pytest.fixture(params=["memory", "sqlite"])
def commanded_app(request: pytest.FixtureRequest, live_app: Conveyor, tmp_path: Path) -> Iterator[Conveyor]:
    """Set up before (so torn down after) the workers ``start_worker`` runs on it."""
    if request.param == "memory":
        yield live_app
        return
    app = Conveyor(f"sqlite:///{tmp_path / 'commands.db'}")
    yield app
    app.close()


def test_quiet_stops_claiming_and_lets_the_running_task_finish(commanded_app: Conveyor, start_worker: Start) -> None:
    app = commanded_app
    release = threading.Event()

    @app.task
    def slow() -> str:
        release.wait(10)
        return "done"

    running = slow.enqueue()
    worker = start_worker(app, registry_interval=0.05)
    runtime = worker.runtime
    assert runtime is not None
    poll_until(lambda: app.get(running.id).state == TaskState.ACTIVE, message="the task to start")
    poll_until(lambda: runtime.worker_id in {w.id for w in app.inspect.workers()}, message="registration")
    app.inspect.command_worker(runtime.worker_id, "quiet")
    poll_until(lambda: runtime.registry.obeyed == "quiet", message="the worker to obey")
    later = slow.enqueue()
    release.set()
    poll_until(lambda: app.get(running.id).state == TaskState.COMPLETED, message="the running task to finish")
    # Several beats (and many claim rounds at poll_interval 0.02 s) pass: nothing new is claimed.
    seen = max(w.last_seen for w in app.inspect.workers())
    poll_until(lambda: max(w.last_seen for w in app.inspect.workers()) > seen + 0.3, message="more beats")
    assert app.get(later.id).state == TaskState.PENDING
    assert not runtime.stopped.is_set()  # quiet, not stopped


def test_stop_shuts_the_worker_down_gracefully(commanded_app: Conveyor, start_worker: Start) -> None:
    app = commanded_app
    worker = start_worker(app, registry_interval=0.05)
    runtime = worker.runtime
    assert runtime is not None
    poll_until(lambda: runtime.worker_id in {w.id for w in app.inspect.workers()}, message="registration")
    app.inspect.command_worker(runtime.worker_id, "stop")
    poll_until(runtime.stopped.is_set, timeout=5.0, message="the worker to stop")
    assert runtime.worker_id not in {w.id for w in app.inspect.workers()}  # unregistered on the way out
    assert app.inspect.worker_command(runtime.worker_id) is None
