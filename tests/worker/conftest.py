"""Fixtures for runtime tests: a memory app on the system clock and a worker running on a thread.

Workers started here (and by the other tests that run one on a thread) do not freeze the heap
(``freeze_heap=False``): the freeze begins with a full collection of the process, here the whole test
session's heap, which made it most of a worker test's time. ``test_garbage.py`` tests the freeze itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor import Conveyor, Worker
from conveyor.brokers.base import Broker
from conveyor.testing import SpyBroker, poll_until

Start = Callable[..., Worker]


async def sleep_until_cancelled(started: threading.Event, cancelled: threading.Event) -> None:
    """An async handler's body: sets ``started``, sleeps 30 s, sets ``cancelled`` if cancelled meanwhile."""
    started.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise


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
        settings.setdefault("freeze_heap", False)  # see the module docstring
        worker = (app or live_app).worker(**settings)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        poll_until(
            lambda: worker.runtime is not None and worker.runtime.started.is_set(), message="the worker to start"
        )
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
        thread.join(timeout=10.0)
        assert not thread.is_alive(), "worker thread did not stop"


@pytest.fixture
def spy() -> SpyBroker[Broker]:
    """A memory broker seen through a ``SpyBroker``: ``spied_app`` runs on it."""
    return SpyBroker.from_url("memory://")


@pytest.fixture
def spied_app(spy: SpyBroker[Broker]) -> Iterator[Conveyor]:
    application = Conveyor(broker=spy)
    yield application
    application.close()
