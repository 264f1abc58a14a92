"""An idle worker on memory:// starts a task enqueued by another thread at once, and a delayed task or a
retry when it falls due, not at its next poll.

Its poll, promoter and reaper (which also promote due tasks) are set to 3 s here; each test waits for
the task with a deadline of :data:`WITHIN` past the moment it may start, half the poll interval, so only
a wake-up by the broker (``MemoryBroker.wait_for_work``) starts it in time, however loaded the host.
"""

from __future__ import annotations

import threading
import time

from conveyor import Conveyor
from conveyor.brokers.base import Broker
from conveyor.retry import Fixed
from conveyor.testing import SpyBroker, poll_until

from .conftest import Start

SLOW = {"poll_interval": 3.0, "promoter_interval": 3.0, "reaper_interval": 3.0}
WITHIN = 1.5


def idle(spy: SpyBroker[Broker]) -> None:
    """Wait until the worker's fetcher has claimed (found nothing: the queue is empty) and waits."""
    poll_until(lambda: spy.calls_to("claim"), message="the worker's first claim")


def test_a_task_enqueued_by_another_thread_starts_at_once(
    spied_app: Conveyor, spy: SpyBroker[Broker], start_worker: Start
) -> None:
    ran = threading.Event()

    @spied_app.task
    def job() -> None:
        ran.set()

    start_worker(spied_app, **SLOW)
    idle(spy)
    producer = threading.Thread(target=job.enqueue)
    producer.start()
    producer.join(timeout=10.0)
    poll_until(ran.is_set, timeout=WITHIN, message="the task to start")


def test_a_delayed_task_starts_at_its_due_time(
    spied_app: Conveyor, spy: SpyBroker[Broker], start_worker: Start
) -> None:
    ran: list[float] = []

    @spied_app.task
    def later() -> None:
        ran.append(time.time())

    start_worker(spied_app, **SLOW)
    idle(spy)
    due = time.time() + 0.7
    later.with_options(delay=0.7).enqueue()
    poll_until(lambda: ran, timeout=0.7 + WITHIN, message="the delayed task to start")
    assert ran[0] >= due - 0.01  # not before it fell due


def test_a_retry_without_backoff_starts_at_once(
    spied_app: Conveyor, spy: SpyBroker[Broker], start_worker: Start
) -> None:
    ran: list[float] = []

    @spied_app.task(max_retries=1, backoff=Fixed(0))
    def flaky() -> None:
        ran.append(time.time())
        if len(ran) == 1:
            raise RuntimeError("first attempt fails")

    start_worker(spied_app, **SLOW)
    idle(spy)
    flaky.enqueue()
    poll_until(lambda: ran, timeout=WITHIN, message="the first attempt")
    poll_until(lambda: len(ran) == 2, timeout=WITHIN, message="the retry")


def test_a_stop_ends_the_idle_fetchers_wait(spied_app: Conveyor, spy: SpyBroker[Broker], start_worker: Start) -> None:
    worker = start_worker(spied_app, poll_interval=30.0)
    idle(spy)
    worker.stop()
    assert worker.runtime is not None
    assert worker.runtime.stopped.wait(10.0)  # not at the end of its fetcher's 30 s wait
