"""Custom backoff policies: registered under a kind they travel with the task and set its waits; an
unregistered one is refused at enqueue; a worker that lacks the kind puts the task back, as for an
unknown task name."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from conveyor import (
    ArchiveReason,
    Conveyor,
    FakeClock,
    Fixed,
    SerializationError,
    TaskState,
    UnknownBackoff,
    Worker,
    register_backoff,
)
from conveyor.model import NewTask
from conveyor.serializers import encode_payload

from .conftest import retry_waits


@register_backoff("test-linear")
@dataclass(frozen=True)
class Linear:
    """``step * n`` seconds after the n-th failure: a dataclass, rebuilt by ``cls(**params)``."""

    step: float = 1.0

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.step * failures

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "test-linear", "step": self.step}


@register_backoff("test-steps")
class Steps:
    """Waits from a list, the last repeated: not a dataclass, rebuilt by its ``from_dict``."""

    def __init__(self, *waits: float) -> None:
        self.waits = waits

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> Steps:
        return cls(*params["waits"])

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.waits[min(failures, len(self.waits)) - 1]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "test-steps", "waits": list(self.waits)}


@dataclass(frozen=True)
class Unregistered:
    seconds: float = 2.0

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "test-unregistered", "seconds": self.seconds}


@register_backoff("test-lossy")
@dataclass(frozen=True)
class Lossy:
    """Its dict form drops ``extra``: a worker would rebuild a different policy."""

    extra: float = 5.0

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.extra

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "test-lossy"}


@pytest.fixture
def always_fails(app: Conveyor) -> str:
    """Registered on the worker's app with its own backoff, which a travelling policy overrides."""

    @app.task(name="always_fails", max_retries=3, backoff=Fixed(100.0))
    def always_fails() -> None:
        raise ConnectionError("down")

    return "always_fails"


def test_registered_custom_backoff_given_at_enqueue_sets_theretry_waits(
    app: Conveyor, producer: Conveyor, clock: FakeClock, worker: Worker, always_fails: str
) -> None:
    handle = producer.enqueue(always_fails, backoff=Linear(step=3.0))
    assert retry_waits(app, clock, worker, handle.id) == [3.0, 6.0, 9.0]
    info = producer.get(handle.id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.FAILED)
    assert info.options == {"backoff": {"kind": "test-linear", "step": 3.0}} and info.options_error is None


def test_custom_backoff_is_rebuilt_by_its_from_dict(
    app: Conveyor, clock: FakeClock, worker: Worker, always_fails: str
) -> None:
    @app.task(name="bound")
    def bound() -> None:
        raise ConnectionError("down")

    handle = bound.with_options(backoff=Steps(1.0, 5.0), max_retries=3).enqueue()
    assert retry_waits(app, clock, worker, handle.id) == [1.0, 5.0, 5.0]


def test_unregistered_custom_backoff_is_refused_at_enqueue_and_nothing_is_written(
    app: Conveyor, always_fails: str
) -> None:
    with pytest.raises(UnknownBackoff, match=r"register_backoff\('test-unregistered'\)"):
        app.enqueue(always_fails, backoff=Unregistered())
    with pytest.raises(ValueError):  # UnknownBackoff is a ConfigurationError, so a ValueError
        app.handler(always_fails).with_options(backoff=Unregistered())  # type: ignore[union-attr]
    assert all(counts["total"] == 0 for counts in app.stats().values())


def test_custom_backoff_that_does_not_survive_its_json_form_is_refused_at_enqueue(
    app: Conveyor, always_fails: str
) -> None:
    with pytest.raises(SerializationError, match="does not survive"):
        app.enqueue(always_fails, backoff=Lossy(extra=1.0))
    assert all(counts["total"] == 0 for counts in app.stats().values())


def test_unregistered_policy_may_still_be_a_registration_default(
    app: Conveyor, clock: FakeClock, worker: Worker
) -> None:
    """Registered options never leave the worker's process, so they need no kind."""

    @app.task(max_retries=1, backoff=Unregistered(seconds=7.0))
    def local() -> None:
        raise ConnectionError("down")

    handle = local.enqueue()
    assert retry_waits(app, clock, worker, handle.id) == [7.0]


def _enqueue_with_kind_unknown_here(app: Conveyor, name: str) -> str:
    """A task as a producer that registered a kind this process lacks stored it (a newer release)."""
    options = '{"backoff":{"kind":"next-release-kind","step":2}}'
    task = NewTask(id="from-next-release", name=name, queue="default", payload=encode_payload([], {}), options=options)
    app.broker.enqueue([task], app.now())
    return "from-next-release"


def test_worker_lacking_the_backoff_kind_puts_the_task_back_not_poison(
    app: Conveyor, clock: FakeClock, always_fails: str
) -> None:
    worker = app.worker(unregistered_delay=5.0, unregistered_window=20.0)
    task_id = _enqueue_with_kind_unknown_here(app, always_fails)
    assert worker.process_next()
    info = app.get(task_id)
    assert (info.state, info.next_run_at, info.attempts) == (TaskState.SCHEDULED, clock.now() + 5.0, 0)
    assert info.last_error is not None and "UnknownBackoff" in info.last_error
    assert "next-release-kind" in info.last_error
    for _ in range(10):
        if app.get(task_id).state is TaskState.ARCHIVED:
            break
        clock.advance(5.0)
        worker.process_next()
    info = app.get(task_id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.UNREGISTERED)


def test_task_with_a_kind_unknown_here_is_listed_and_shown_without_error(app: Conveyor, always_fails: str) -> None:
    """Admin tools need not import the app's policies: the stored policy is shown, not an error."""
    task_id = _enqueue_with_kind_unknown_here(app, always_fails)
    (listed,) = app.inspect.list("default", "pending")
    assert listed.id == task_id and listed.options_error is None
    assert listed.options == {"backoff": {"kind": "next-release-kind", "step": 2}}
    assert app.get(task_id).max_retries == 3


def test_lease_fail_follows_a_custom_backoff_given_at_enqueue(app: Conveyor, clock: FakeClock) -> None:
    handle = app.enqueue("external", backoff=Linear(step=4.0))
    lease = app.claim()
    assert lease is not None
    lease.fail("not yet")
    assert app.get(handle.id).next_run_at == clock.now() + 4.0


def test_lease_on_a_task_whose_kind_is_unknown_here_settles_with_the_registered_options(
    app: Conveyor, clock: FakeClock, always_fails: str
) -> None:
    """The consumer did the work: its failure is recorded (with the registered Fixed(100)), not refused."""
    task_id = _enqueue_with_kind_unknown_here(app, always_fails)
    lease = app.claim()
    assert lease is not None
    lease.fail("not yet")
    assert app.get(task_id).next_run_at == clock.now() + 100.0
