"""Fixtures for runtime tests: a memory app on the system clock and a worker running on a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor import Conveyor, Worker

Start = Callable[..., Worker]
Wait = Callable[..., None]


def poll_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


async def sleep_until_cancelled(started: threading.Event, cancelled: threading.Event) -> None:
    """An async handler's body: sets ``started``, sleeps 30 s, sets ``cancelled`` if cancelled meanwhile."""
    started.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise


@pytest.fixture
def wait_until() -> Wait:
    """``wait_until(predicate, timeout=5.0, what=...)``: poll with a deadline; fails the test on timeout."""
    return poll_until


@pytest.fixture
def live_app() -> Iterator[Conveyor]:
    application = Conveyor("memory://")
    yield application
    application.close()


@pytest.fixture
def start_worker(live_app: Conveyor) -> Iterator[Start]:
    """``start_worker(**settings)`` runs ``live_app.worker(...).run()`` on a thread; stopped at teardown."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(app: Conveyor | None = None, **settings: Any) -> Worker:
        settings.setdefault("poll_interval", 0.02)
        worker = (app or live_app).worker(**settings)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        poll_until(lambda: worker.runtime is not None and worker.runtime.started.is_set(), what="worker start")
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
        thread.join(timeout=10.0)
        assert not thread.is_alive(), "worker thread did not stop"
