"""A worker on a SQLite file, a real Redis server or a cluster runs a delayed task, and a retry, when it falls due.

Its poll, promoter and reaper (which also promote due tasks) are set to 3 s here, so only the idle
wait's end at the due time its last claim read (``SQLiteBroker.wait_for_work``; on Redis ``dues.py``)
or a wake-up can start the task within the bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.retry import Fixed
from conveyor.testing import poll_until

from .conftest import Start

SLOW = {"poll_interval": 3.0, "promoter_interval": 3.0, "reaper_interval": 3.0}
#: Late by more than this, the task waited for one of the slow timers above, or for the SQLite idle
#: waiter's look at ``PRAGMA data_version`` every 0.5 s (or the host stalled).
BOUND = 0.3


@pytest.fixture(params=["sqlite", "redis", "redis cluster"])
def due_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'conveyor.db'}"
    else:  # no clock given: the server's (ServerClock)
        url = str(request.getfixturevalue("redis_cluster_url" if request.param.endswith("cluster") else "redis_url"))
    app = Conveyor(url)
    yield app
    app.close()


def test_a_delayed_task_runs_at_its_due_time(due_app: Conveyor, start_worker: Start) -> None:
    ran: list[float] = []

    @due_app.task
    def later() -> None:
        ran.append(time.time())

    start_worker(due_app, **SLOW)
    due = time.time() + 0.7  # (not a multiple of SQLite's 0.5 s look at data_version, which claims too)
    later.with_options(delay=0.7).enqueue()
    poll_until(lambda: ran, timeout=10.0, message="the delayed task to run")
    assert due - 0.01 <= ran[0] < due + BOUND


@pytest.mark.parametrize("backoff", [0.0, 0.5])
def test_a_retry_runs_at_its_due_time(due_app: Conveyor, start_worker: Start, backoff: float) -> None:
    ran: list[float] = []
    done = threading.Event()

    @due_app.task(max_retries=1, backoff=Fixed(backoff))
    def flaky() -> None:
        ran.append(time.time())
        if len(ran) == 1:
            time.sleep(0.05)  # the fetcher is waiting again before this outcome is settled, not claiming
            raise RuntimeError("first attempt fails")
        done.set()

    start_worker(due_app, **SLOW)
    flaky.enqueue()
    assert done.wait(10.0)
    assert backoff - 0.01 <= ran[1] - ran[0] - 0.05 < backoff + BOUND
