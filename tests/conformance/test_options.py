"""Per-enqueue options, and where the options a task runs with come from.

Options given at enqueue travel with the task; every other option is resolved when the task runs,
from the *worker's* registration of that name, then from the library defaults.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import (
    ArchiveReason,
    Conveyor,
    DuplicateTask,
    FakeClock,
    Fixed,
    TaskHandle,
    TaskNotFound,
    TaskState,
    Worker,
)

Enqueue = Callable[..., TaskHandle[Any]]


class Flaky(Exception):
    pass


@pytest.fixture
def outcomes() -> list[BaseException]:
    """What the ``job`` handler raises, one per execution; once empty it returns its argument."""
    return []


@pytest.fixture
def job(app: Conveyor, outcomes: list[BaseException]) -> str:
    @app.task
    def job(value: int) -> int:
        if outcomes:
            raise outcomes.pop(0)
        return value

    return job.name


@pytest.fixture(params=["with_options", "app.enqueue"])
def enqueue(request: pytest.FixtureRequest, app: Conveyor, job: str) -> Enqueue:
    """Enqueue ``job(value)`` with options, through each of the two per-enqueue APIs."""

    def via_with_options(value: int, **options: Any) -> TaskHandle[Any]:
        registered = app.handler(job)
        assert registered is not None
        return registered.with_options(**options).enqueue(value)

    def via_app(value: int, **options: Any) -> TaskHandle[Any]:
        return app.enqueue(job, args=[value], **options)

    return via_with_options if request.param == "with_options" else via_app


def test_queue_option_puts_the_task_on_that_queue(app: Conveyor, worker: Worker, enqueue: Enqueue) -> None:
    handle = enqueue(1, queue="mail")
    assert app.get(handle.id).queue == "mail"
    assert not worker.process_next()
    assert app.worker(queues=["mail"]).process_next()


def test_task_id_option_names_the_task(app: Conveyor, enqueue: Enqueue) -> None:
    assert enqueue(1, task_id="order-42:v1").id == "order-42:v1"
    assert app.get("order-42:v1").args == [1]


def test_delay_option_schedules_the_task(app: Conveyor, clock: FakeClock, enqueue: Enqueue) -> None:
    assert app.get(enqueue(1, delay=30).id).next_run_at == clock.now() + 30


def test_eta_option_schedules_the_task(app: Conveyor, clock: FakeClock, enqueue: Enqueue) -> None:
    assert app.get(enqueue(1, eta=clock.now() + 45).id).next_run_at == clock.now() + 45


def test_priority_option_sets_the_priority(app: Conveyor, enqueue: Enqueue) -> None:
    assert app.get(enqueue(1, priority=7).id).priority == 7


def test_max_retries_option_sets_the_retry_budget(
    app: Conveyor, worker: Worker, enqueue: Enqueue, outcomes: list[BaseException]
) -> None:
    outcomes.append(Flaky("x"))
    handle = enqueue(1, max_retries=0)
    assert (app.get(handle.id).max_retries, app.get(handle.id).retries_left) == (0, 0)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


def test_backoff_option_sets_the_wait(
    app: Conveyor, clock: FakeClock, worker: Worker, enqueue: Enqueue, outcomes: list[BaseException]
) -> None:
    outcomes.append(Flaky("x"))
    handle = enqueue(1, backoff=Fixed(77.0))
    worker.process_next()
    assert app.get(handle.id).next_run_at == clock.now() + 77.0


def test_retry_on_option_sets_what_is_retryable(
    app: Conveyor, worker: Worker, enqueue: Enqueue, outcomes: list[BaseException]
) -> None:
    outcomes.append(Flaky("x"))
    handle = enqueue(1, retry_on=(KeyError,))
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.PERMANENT


def test_timeout_option_bounds_the_handler(app: Conveyor, worker: Worker) -> None:
    @app.task
    async def slow() -> None:
        await asyncio.sleep(30)

    handle = slow.with_options(timeout=0.01).enqueue()
    worker.process_next()
    info = app.get(handle.id)
    assert info.state is TaskState.RETRY
    assert info.last_error is not None and info.last_error.startswith("TaskTimeout")


def test_expires_option_sets_the_deadline(app: Conveyor, clock: FakeClock, worker: Worker, enqueue: Enqueue) -> None:
    handle = enqueue(1, expires=5)
    clock.advance(5)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.EXPIRED


def test_retention_option_sets_how_long_the_result_stays(
    app: Conveyor, clock: FakeClock, worker: Worker, enqueue: Enqueue
) -> None:
    handle = enqueue(1, retention=10)
    worker.process_next()
    clock.advance(9.5)
    assert app.get(handle.id).result == 1
    clock.advance(0.5)
    with pytest.raises(TaskNotFound):
        app.get(handle.id)


def test_unique_for_option_rejects_the_same_call(enqueue: Enqueue) -> None:
    first = enqueue(1, unique_for=60)
    with pytest.raises(DuplicateTask) as dup:
        enqueue(1, unique_for=60)
    assert dup.value.existing_id == first.id


def test_unique_key_option_rejects_another_call_with_that_key(enqueue: Enqueue) -> None:
    first = enqueue(1, unique_key="nightly-report")
    with pytest.raises(DuplicateTask) as dup:
        enqueue(2, unique_key="nightly-report")
    assert dup.value.existing_id == first.id


def test_with_options_chains_and_later_values_win(app: Conveyor, job: str) -> None:
    registered = app.handler(job)
    assert registered is not None
    handle = registered.with_options(priority=1, queue="a").with_options(priority=2).enqueue(1)
    info = app.get(handle.id)
    assert (info.priority, info.queue) == (2, "a")


def test_registered_options_apply_when_none_are_given(app: Conveyor, clock: FakeClock) -> None:
    @app.task(queue="reports", priority=3, max_retries=1, expires=50)
    def report() -> None: ...

    info = app.get(report.enqueue().id)
    assert (info.queue, info.priority, info.max_retries, info.expires_at) == ("reports", 3, 1, clock.now() + 50)


# -- producer-only code: options resolved from the worker's registration -------------------------


@pytest.fixture
def registered_flaky(app: Conveyor, outcomes: list[BaseException]) -> str:
    """The worker side: ``flaky`` registered with its own retry policy."""

    @app.task(name="flaky", max_retries=1, backoff=Fixed(9.0), retry_on=(Flaky,), retention=100.0)
    def flaky() -> str:
        if outcomes:
            raise outcomes.pop(0)
        return "done"

    return flaky.name


def test_producer_without_the_handler_can_enqueue_by_name(producer: Conveyor, app: Conveyor, worker: Worker) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = producer.enqueue("add", args=[2], kwargs={"b": 3})
    worker.process_next()
    assert producer.get(handle.id).result == 5


def test_options_not_given_are_taken_from_the_workers_registration(
    producer: Conveyor,
    app: Conveyor,
    clock: FakeClock,
    worker: Worker,
    registered_flaky: str,
    outcomes: list[BaseException],
) -> None:
    outcomes.extend([Flaky("1"), Flaky("2")])
    handle = producer.enqueue(registered_flaky)
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.next_run_at) == (TaskState.RETRY, clock.now() + 9.0)
    clock.advance(9.0)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


def test_retry_on_not_given_is_taken_from_the_workers_registration(
    producer: Conveyor, app: Conveyor, worker: Worker, registered_flaky: str, outcomes: list[BaseException]
) -> None:
    outcomes.append(ValueError("not Flaky"))
    handle = producer.enqueue(registered_flaky)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.PERMANENT


def test_retention_not_given_is_taken_from_the_workers_registration(
    producer: Conveyor, app: Conveyor, clock: FakeClock, worker: Worker, registered_flaky: str
) -> None:
    handle = producer.enqueue(registered_flaky)
    worker.process_next()
    clock.advance(100.0)
    with pytest.raises(TaskNotFound):
        producer.get(handle.id)


def test_options_given_at_enqueue_travel_and_win_over_the_workers_registration(
    producer: Conveyor,
    app: Conveyor,
    clock: FakeClock,
    worker: Worker,
    registered_flaky: str,
    outcomes: list[BaseException],
) -> None:
    outcomes.extend([ValueError("1"), ValueError("2"), ValueError("3")])
    handle = producer.enqueue(registered_flaky, max_retries=2, backoff=Fixed(4.0), retry_on=(ValueError,))
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.next_run_at, info.retries_left) == (TaskState.RETRY, clock.now() + 4.0, 1)
    clock.advance(4.0)
    worker.process_next()
    assert app.get(handle.id).state is TaskState.RETRY
    clock.advance(4.0)
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


def test_producer_without_the_handler_uses_library_defaults_for_its_own_options(
    producer: Conveyor, clock: FakeClock
) -> None:
    info = producer.get(producer.enqueue("elsewhere").id)
    assert (info.queue, info.priority, info.expires_at) == ("default", 0, None)
    assert info.max_retries is None  # the worker's registration decides it (test_retry_limit.py)
