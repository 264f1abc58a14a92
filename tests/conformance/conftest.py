"""Fixtures of the conformance suite: every test that takes ``app`` runs once per broker backend.

Tests here go through the public, backend-neutral API only, so a new backend passes them unchanged.
Here the Redis broker runs twice: on one server, and on a 3-master Redis Cluster (``redis-cluster``,
one cluster per session, a namespace per test).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator

import pytest

from conveyor import BrokerPolicy, Conveyor, FakeClock, TaskState, Worker
from conveyor.testing import poll_until

AppFactory = Callable[..., Conveyor]


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
def broker_url(request: pytest.FixtureRequest, url_of_backend: Callable[[str], str]) -> str:
    return url_of_backend(request.param)


Transition = tuple[str | None, str]


@pytest.fixture
def worker(app: Conveyor) -> Worker:
    """A steppable worker on the ``default`` queue."""
    return app.worker()


@pytest.fixture
def producer(app: Conveyor, clock: FakeClock) -> Conveyor:
    """Producer-only code: a second app on the same broker with no handler registered."""
    return Conveyor(broker=app.broker, clock=clock)


@pytest.fixture
def make_app(broker_url: str, clock: FakeClock) -> Iterator[AppFactory]:
    """Open apps on this test's broker URL with their own policy or RNG (not mixed with ``app``)."""
    opened: list[Conveyor] = []

    def make(*, policy: BrokerPolicy | None = None, rng: random.Random | None = None) -> Conveyor:
        application = Conveyor(broker_url, clock=clock, policy=policy, rng=rng)
        opened.append(application)
        return application

    yield make
    for application in opened:
        application.close()


def retry_waits(app: Conveyor, clock: FakeClock, worker: Worker, task_id: str) -> list[float]:
    """Run the task until it is no longer retried (the clock jumps to each retry); the wait the
    worker set after each failure."""
    waits: list[float] = []
    worker.process_next()
    while (info := app.get(task_id)).state is TaskState.RETRY:
        assert info.next_run_at is not None
        waits.append(info.next_run_at - clock.now())
        clock.set(info.next_run_at)
        assert worker.process_next()
    return waits


class Events:
    """Records ``on_state_change`` calls; backends may deliver them asynchronously, so wait with a deadline."""

    def __init__(self, app: Conveyor) -> None:
        self._lock = threading.Lock()
        self._seen: list[tuple[str, str | None, str]] = []
        self.unsubscribe = app.on_state_change(self._record)

    def _record(self, task_id: str, old: str | None, new: str) -> None:
        with self._lock:
            self._seen.append((task_id, old, new))

    def of(self, task_id: str) -> list[Transition]:
        with self._lock:
            return [(old, new) for tid, old, new in self._seen if tid == task_id]

    def wait_for(self, task_id: str, expected: list[Transition], timeout: float = 5.0) -> list[Transition]:
        """The task's transitions once they equal ``expected`` (or at the deadline, for the assert)."""
        with contextlib.suppress(AssertionError):  # the caller's assert shows what came instead
            poll_until(lambda: self.of(task_id) == expected, timeout=timeout, interval=0.005)
        return self.of(task_id)


@pytest.fixture
def events(app: Conveyor) -> Events:
    return Events(app)
