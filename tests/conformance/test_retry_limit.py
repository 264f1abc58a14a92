"""The retry limit a task runs with, as readers see it (``TaskInfo.max_retries`` / ``retries_left``).

The limit is resolved where the task runs: from the enqueue's options, else the worker's registration.
A reader without the handler learns it from the worker: a starting worker declares its tasks (their
limits included, ``conveyor.declared``), and a worker records the limit on the task when an execution
fails. Before either, such a reader shows it as unknown (None), never the library default.
"""

from __future__ import annotations

import pytest

from conveyor import ArchiveReason, Conveyor, FakeClock, TaskState, Worker, WorkerConfig
from conveyor.worker.registry import Registry


class Flaky(Exception):
    pass


@pytest.fixture
def worker_side(app: Conveyor) -> Worker:
    """The worker's app registers ``flaky`` with a retry limit of 1 (the producer has no handler)."""

    @app.task(name="flaky", max_retries=1)
    def flaky() -> None:
        raise Flaky("down")

    return app.worker()


def limits(reader: Conveyor, task_id: str) -> tuple[int | None, int | None]:
    info = reader.get(task_id)
    return info.max_retries, info.retries_left


def test_a_reader_without_the_handler_shows_unknown_until_a_worker_records_the_limit(
    producer: Conveyor, worker_side: Worker, clock: FakeClock
) -> None:
    task_id = producer.enqueue("flaky").id
    assert limits(producer, task_id) == (None, None)
    assert worker_side.process_next()
    assert producer.get(task_id).state is TaskState.RETRY
    assert limits(producer, task_id) == (1, 0)  # the worker's limit, not the library's 3
    clock.advance(3600)
    assert worker_side.process_next()
    info = producer.get(task_id)
    assert (info.state, info.archive_reason, info.max_retries, info.retries_left) == (
        TaskState.ARCHIVED,
        ArchiveReason.FAILED,
        1,
        0,
    )


def test_the_recorded_limit_survives_run_now_which_gives_the_retries_back(
    producer: Conveyor, worker_side: Worker, clock: FakeClock
) -> None:
    task_id = producer.enqueue("flaky").id
    worker_side.process_next()
    clock.advance(3600)
    worker_side.process_next()
    producer.inspect.run_now(task_id)
    assert limits(producer, task_id) == (1, 1)


def test_a_claimed_task_carries_its_recorded_limit(producer: Conveyor, worker_side: Worker, clock: FakeClock) -> None:
    task_id = producer.enqueue("flaky").id
    worker_side.process_next()
    clock.advance(3600)
    lease = producer.claim()
    assert lease is not None and lease.task.id == task_id
    assert (lease.task.max_retries, lease.task.retries_left) == (1, 0)
    assert producer.get(task_id).max_retries == 1


def test_a_limit_given_at_enqueue_is_known_from_the_start(producer: Conveyor) -> None:
    assert limits(producer, producer.enqueue("flaky", max_retries=5).id) == (5, 5)


def test_a_reader_with_the_handler_resolves_the_limit_before_any_run(app: Conveyor, worker_side: Worker) -> None:
    assert limits(app, app.enqueue("flaky").id) == (1, 1)


def test_an_external_consumer_records_the_limit_it_failed_the_task_with(producer: Conveyor) -> None:
    task_id = producer.enqueue("manual-review").id
    lease = producer.claim()
    assert lease is not None
    lease.fail("needs a second look")  # unregistered here: the library's defaults apply, and are recorded
    assert limits(producer, task_id) == (3, 2)


def test_a_completed_task_without_failures_has_no_recorded_limit(producer: Conveyor) -> None:
    task_id = producer.enqueue("manual-review").id
    lease = producer.claim()
    assert lease is not None
    lease.complete("ok")
    assert producer.get(task_id).state is TaskState.COMPLETED
    assert limits(producer, task_id) == (None, None)


def test_a_reader_without_the_handler_learns_the_limit_once_a_worker_serving_it_starts(
    producer: Conveyor, worker_side: Worker, app: Conveyor
) -> None:
    Registry(app, WorkerConfig(), "w1", running=lambda: (), counts=lambda: (0, 0)).tick()  # a worker's first beat
    task_id = producer.enqueue("flaky").id
    assert limits(producer, task_id) == (1, 1)  # the worker's limit before any execution, not the library's 3
