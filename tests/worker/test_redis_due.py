"""A worker on a real Redis server runs a delayed task, and a retry with a backoff, when it falls due.

Its poll, promoter and reaper (which also promote due tasks) are set to 3 s here, so only the end of
the idle wait at the due time its last claim read (``dues.py``) can start the task within the bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from conveyor import Conveyor
from conveyor.retry import Fixed
from conveyor.testing import poll_until

from .conftest import Start

SLOW = {"poll_interval": 3.0, "promoter_interval": 3.0, "reaper_interval": 3.0}
#: Late by more than this, the task waited for one of the slow timers above (or the host stalled).
BOUND = 0.3


@pytest.fixture
def redis_app(redis_url: str) -> Iterator[Conveyor]:
    app = Conveyor(redis_url)  # no clock given: the server's (ServerClock)
    yield app
    app.close()


def test_a_delayed_task_runs_at_its_due_time(redis_app: Conveyor, start_worker: Start) -> None:
    ran: list[float] = []

    @redis_app.task
    def later() -> None:
        ran.append(time.time())

    start_worker(redis_app, **SLOW)
    due = time.time() + 0.7
    later.with_options(delay=0.7).enqueue()
    poll_until(lambda: ran, timeout=10.0, message="the delayed task to run")
    assert due - 0.01 <= ran[0] < due + BOUND


def test_a_retry_with_backoff_runs_at_its_due_time(redis_app: Conveyor, start_worker: Start) -> None:
    ran: list[float] = []
    done = threading.Event()

    @redis_app.task(max_retries=1, backoff=Fixed(0.5))
    def flaky() -> None:
        ran.append(time.time())
        if len(ran) == 1:
            raise RuntimeError("first attempt fails")
        done.set()

    start_worker(redis_app, **SLOW)
    flaky.enqueue()
    assert done.wait(10.0)
    assert 0.5 - 0.01 <= ran[1] - ran[0] < 0.5 + BOUND
