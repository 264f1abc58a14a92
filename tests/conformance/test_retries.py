"""Retries and backoff: retry_on, retries_left, the backoff schedule, Retry and PermanentError."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from conveyor import ArchiveReason, Conveyor, Exponential, FakeClock, Fixed, PermanentError, Retry, TaskState, Worker

from .conftest import retry_waits

if TYPE_CHECKING:
    from conformance.conftest import AppFactory

Register = Callable[..., str]


class Unreachable(Exception):
    """A retryable error of the tests' own."""


class BadInput(PermanentError):
    """A PermanentError subclass."""


@pytest.fixture
def to_raise() -> list[BaseException]:
    """What the ``flaky`` handler raises, one per execution; once empty it returns "ok"."""
    return []


def _register_flaky(app: Conveyor, to_raise: list[BaseException], **options: Any) -> str:
    @app.task(name="flaky", **options)
    def flaky() -> str:
        if to_raise:
            raise to_raise.pop(0)
        return "ok"

    return flaky.name


@pytest.fixture
def register(app: Conveyor, to_raise: list[BaseException]) -> Register:
    def register(**options: Any) -> str:
        return _register_flaky(app, to_raise, **options)

    return register


def test_retryable_failure_moves_the_task_to_retry_and_uses_one_retry(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Unreachable("host down"))
    handle = app.enqueue(register())
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.attempts, info.retries_left) == (TaskState.RETRY, 1, 2)
    assert info.next_run_at == clock.now() + 1.0
    assert info.last_error == "Unreachable: host down"


def test_retried_task_runs_again_once_due(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Unreachable("once"))
    handle = app.enqueue(register())
    worker.process_next()
    assert not worker.process_next()
    clock.advance(1.0)
    assert worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.attempts, info.retries_left, info.result) == (TaskState.COMPLETED, 2, 2, "ok")


def test_exponential_backoff_waits_initial_then_multiplies_by_factor(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.extend(Unreachable(str(n)) for n in range(4))
    handle = app.enqueue(register(max_retries=4, backoff=Exponential(initial=2.0, factor=3.0, max=None)))
    assert retry_waits(app, clock, worker, handle.id) == [2.0, 6.0, 18.0, 54.0]


def test_default_backoff_is_exponential_from_one_second_doubling(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.extend(Unreachable(str(n)) for n in range(3))
    handle = app.enqueue(register())
    assert retry_waits(app, clock, worker, handle.id) == [1.0, 2.0, 4.0]


def test_exponential_backoff_is_capped_at_max(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.extend(Unreachable(str(n)) for n in range(4))
    handle = app.enqueue(register(max_retries=4, backoff=Exponential(initial=10.0, factor=10.0, max=500.0)))
    assert retry_waits(app, clock, worker, handle.id) == [10.0, 100.0, 500.0, 500.0]


def test_fixed_backoff_waits_the_same_after_every_failure(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.extend(Unreachable(str(n)) for n in range(3))
    handle = app.enqueue(register(backoff=Fixed(7.5)))
    assert retry_waits(app, clock, worker, handle.id) == [7.5, 7.5, 7.5]


def test_retries_exhausted_archive_the_task_as_failed(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.extend(Unreachable(f"try {n}") for n in range(1, 4))
    handle = app.enqueue(register(max_retries=2))
    assert len(retry_waits(app, clock, worker, handle.id)) == 2
    info = app.get(handle.id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.FAILED)
    assert (info.attempts, info.retries_left, info.last_error) == (3, 0, "Unreachable: try 3")


def test_max_retries_zero_archives_on_the_first_failure(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Unreachable("x"))
    handle = app.enqueue(register(max_retries=0))
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


def test_jitter_randomises_the_wait_with_the_apps_seeded_rng(
    make_app: AppFactory, clock: FakeClock, to_raise: list[BaseException]
) -> None:
    backoff = Exponential(initial=100.0, factor=2.0, max=None, jitter=True)

    def waits_with_seed(seed: int) -> list[float]:
        app = make_app(rng=random.Random(seed))
        task_name = _register_flaky(app, to_raise, backoff=backoff, max_retries=3)
        to_raise.extend(Unreachable(str(n)) for n in range(3))
        handle = app.enqueue(task_name)
        return retry_waits(app, clock, app.worker(), handle.id)

    first, again = waits_with_seed(1), waits_with_seed(1)
    assert first == again
    assert len(first) == 3
    assert all(0.0 <= wait <= 100.0 * 2**n for n, wait in enumerate(first))
    assert first != [100.0, 200.0, 400.0]
    assert waits_with_seed(2) != first


def test_raise_retry_asks_for_a_retry_after_its_delay(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Retry(delay=42.0))
    handle = app.enqueue(register())
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.next_run_at, info.retries_left) == (TaskState.RETRY, clock.now() + 42.0, 2)


def test_a_retry_asked_for_past_the_year_9999_waits_until_then(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    """Stored as the last time a date shows, so every page and command can still show the task."""
    to_raise.append(Retry(delay=1e308))
    handle = app.enqueue(register())
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.next_run_at) == (TaskState.RETRY, 253402300799.0)


def test_a_huge_error_is_stored_cut_to_its_bound(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    """Every failure, the error history and each log line carry the error: a 5 MB message is stored
    as its first three quarters and its end, 4 KiB in all."""
    to_raise.append(ValueError("s" + "m" * 5_000_000 + "e"))
    handle = app.enqueue(register())
    worker.process_next()
    info = app.get(handle.id)
    assert info.last_error is not None and len(info.last_error) == 4096
    assert info.last_error.startswith("ValueError: smm") and info.last_error.endswith("mme")
    assert [len(entry.error) for entry in info.errors] == [4096]


def test_raise_retry_without_a_delay_uses_the_backoff(
    app: Conveyor, clock: FakeClock, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Retry())
    handle = app.enqueue(register(backoff=Fixed(9.0)))
    worker.process_next()
    assert app.get(handle.id).next_run_at == clock.now() + 9.0


def test_raise_retry_with_no_retries_left_archives_as_failed(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Retry(delay=1.0))
    handle = app.enqueue(register(max_retries=0))
    worker.process_next()
    assert app.get(handle.id).archive_reason is ArchiveReason.FAILED


@pytest.mark.parametrize("error", [PermanentError("bad input"), BadInput("bad input")], ids=["base", "subclass"])
def test_permanent_error_archives_at_once_without_retry(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException], error: BaseException
) -> None:
    to_raise.append(error)
    handle = app.enqueue(register())
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.attempts) == (TaskState.ARCHIVED, ArchiveReason.PERMANENT, 1)
    assert info.last_error == f"{type(error).__name__}: bad input"


def test_exception_outside_retry_on_archives_as_permanent(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(ValueError("not a lookup"))
    handle = app.enqueue(register(retry_on=(LookupError,)))
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.retries_left) == (TaskState.ARCHIVED, ArchiveReason.PERMANENT, 3)


def test_subclass_of_a_retry_on_class_is_retried(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(KeyError("k"))
    handle = app.enqueue(register(retry_on=(LookupError,)))
    worker.process_next()
    assert app.get(handle.id).state is TaskState.RETRY


def test_last_error_is_the_exception_type_and_message(
    app: Conveyor, worker: Worker, register: Register, to_raise: list[BaseException]
) -> None:
    to_raise.append(Unreachable("db at 10.0.0.1 is down"))
    handle = app.enqueue(register())
    worker.process_next()
    assert app.get(handle.id).last_error == "Unreachable: db at 10.0.0.1 is down"


class Unprintable(Exception):
    """An exception whose ``__str__`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_an_unprintable_exception_fails_its_task_as_any_failure_does(app: Conveyor, worker: Worker) -> None:
    """Its ``__str__`` raising broke the failure's own handling: the task stayed active until its
    lease expired, ran again as a stalled task, and ended archived ``poison`` with its error lost."""

    @app.task(max_retries=1)
    def unprintable() -> None:
        raise Unprintable()

    handle = unprintable.enqueue()
    assert worker.process_next()
    info = app.get(handle.id)
    error = "Unprintable: <exception str() failed>"
    assert (info.state, info.last_error, info.retries_left) == (TaskState.RETRY, error, 0)
    app.inspect.run_now(handle.id)
    assert worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.archive_reason, info.last_error) == (TaskState.ARCHIVED, ArchiveReason.FAILED, error)
