"""The task state machine: pending / scheduled at enqueue, attempts, completion, reading tasks."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from conveyor import (
    ConfigurationError,
    Conveyor,
    FakeClock,
    ResultTimeout,
    TaskFailed,
    TaskNotFound,
    TaskState,
    Worker,
)


@pytest.fixture
def greet(app: Conveyor) -> object:
    @app.task
    def greet(name: str, punctuation: str = "!") -> str:
        return f"hello {name}{punctuation}"

    return greet


@pytest.fixture
def boom_once(app: Conveyor) -> list[int]:
    calls: list[int] = []

    @app.task
    def boom_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return "ok"

    return calls


def test_new_task_is_pending_with_no_attempts_and_full_retry_budget(
    app: Conveyor, clock: FakeClock, greet: object
) -> None:
    handle = app.enqueue("greet", args=["ann"], kwargs={"punctuation": "?"})
    info = app.get(handle.id)
    assert isinstance(handle.id, str)
    assert (info.id, info.name, info.queue, info.state) == (handle.id, "greet", "default", TaskState.PENDING)
    assert (info.attempts, info.max_retries, info.retries_left) == (0, 3, 3)
    assert info.next_run_at is None
    assert (info.args, info.kwargs) == (["ann"], {"punctuation": "?"})
    assert info.enqueued_at == clock.now()
    assert (info.started_at, info.finished_at, info.result, info.last_error, info.archive_reason) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_task_name_defaults_to_the_function_name(app: Conveyor) -> None:
    @app.task
    def resize_image() -> None: ...

    @app.task(name="custom.name")
    def other() -> None: ...

    assert (resize_image.name, other.name) == ("resize_image", "custom.name")
    assert app.get(resize_image.enqueue().id).name == "resize_image"


def test_registering_a_second_handler_under_a_taken_name_is_an_error(app: Conveyor) -> None:
    @app.task(name="job")
    def first() -> None: ...

    with pytest.raises(ConfigurationError, match="job"):

        @app.task(name="job")
        def second() -> None: ...


def test_delay_makes_a_task_scheduled_with_next_run_at(app: Conveyor, clock: FakeClock, greet: object) -> None:
    info = app.get(app.enqueue("greet", args=["ann"], delay=30).id)
    assert (info.state, info.next_run_at) == (TaskState.SCHEDULED, clock.now() + 30)


@pytest.mark.parametrize("as_datetime", [False, True], ids=["epoch", "aware-datetime"])
def test_future_eta_makes_a_task_scheduled(app: Conveyor, clock: FakeClock, greet: object, as_datetime: bool) -> None:
    at = clock.now() + 120
    eta: float | datetime = datetime.fromtimestamp(at, UTC) if as_datetime else at
    info = app.get(app.enqueue("greet", args=["ann"], eta=eta).id)
    assert (info.state, info.next_run_at) == (TaskState.SCHEDULED, at)


def test_eta_in_the_past_means_due_now(app: Conveyor, clock: FakeClock, worker: Worker, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"], eta=clock.now() - 60)
    assert app.get(handle.id).state is TaskState.PENDING
    assert worker.process_next()
    assert app.get(handle.id).state is TaskState.COMPLETED


def test_scheduled_task_never_runs_before_next_run_at(
    app: Conveyor, clock: FakeClock, worker: Worker, greet: object
) -> None:
    handle = app.enqueue("greet", args=["ann"], delay=10)
    clock.advance(9.999)
    assert not worker.process_next()
    clock.advance(0.001)
    assert worker.process_next()
    assert app.get(handle.id).state is TaskState.COMPLETED


def test_success_completes_with_the_result(app: Conveyor, clock: FakeClock, worker: Worker, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    clock.advance(5)
    assert worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.result, info.attempts) == (TaskState.COMPLETED, "hello ann!", 1)
    assert info.started_at == info.finished_at == clock.now()


def test_an_archived_task_has_finished_at_and_completed_at_is_its_deprecated_alias(
    app: Conveyor, clock: FakeClock, greet: object
) -> None:
    handle = app.enqueue("greet", args=["ann"])
    clock.advance(3)
    app.inspect.archive(handle.id)
    info = app.get(handle.id)
    assert (info.state, info.finished_at) == (TaskState.ARCHIVED, clock.now())
    with pytest.deprecated_call(match="finished_at"):
        alias = info.completed_at
    assert alias == info.finished_at


def test_a_none_result_is_not_stored_and_reads_as_none(app: Conveyor, worker: Worker) -> None:
    """Most handlers return None: its "null" is not written (a write and the memory of a value saved per
    task); the task reads as completed with the result None all the same, through a worker or a lease."""
    ran: list[int] = []

    @app.task
    def fire_and_forget(n: int) -> None:
        ran.append(n)

    @app.task
    def zero() -> int:
        return 0

    handles = [app.enqueue("fire_and_forget", args=[1]), app.enqueue("zero")]
    assert worker.process_next() and worker.process_next()
    app.enqueue("fire_and_forget", args=[2])
    lease = app.claim()
    assert lease is not None
    lease.complete(None)
    records = [app.broker.get(h.id, app.now()) for h in handles] + [app.broker.get(lease.task.id, app.now())]
    assert [(r.state, r.result) for r in records if r is not None] == [
        (TaskState.COMPLETED, None),
        (TaskState.COMPLETED, "0"),
        (TaskState.COMPLETED, None),
    ]
    infos = [app.get(h.id) for h in handles]
    assert [(i.state, i.result) for i in infos] == [(TaskState.COMPLETED, None), (TaskState.COMPLETED, 0)]
    assert handles[0].result() is None and ran == [1]


def test_each_execution_increments_attempts_and_success_clears_last_error(
    app: Conveyor, clock: FakeClock, worker: Worker, boom_once: list[int]
) -> None:
    handle = app.enqueue("boom_once")
    worker.process_next()
    assert (app.get(handle.id).attempts, app.get(handle.id).last_error) == (1, "ValueError: first call fails")
    clock.advance(3600)
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.attempts, info.last_error, info.result) == (TaskState.COMPLETED, 2, None, "ok")


def test_process_next_returns_false_when_nothing_is_runnable(worker: Worker) -> None:
    assert worker.process_next() is False


def test_run_until_idle_returns_how_many_ran(app: Conveyor, worker: Worker, greet: object) -> None:
    for name in ("a", "b", "c"):
        app.enqueue("greet", args=[name])
    app.enqueue("greet", args=["later"], delay=1)
    assert worker.run_until_idle() == 3
    assert worker.run_until_idle() == 0


def test_get_of_an_unknown_id_raises_task_not_found(app: Conveyor) -> None:
    with pytest.raises(TaskNotFound):
        app.get("no-such-task")


def test_handle_status_is_the_stored_task_info(app: Conveyor, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    assert handle.status() == app.get(handle.id)


def test_handle_result_returns_the_handlers_value(app: Conveyor, worker: Worker, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    worker.run_until_idle()
    assert handle.result(timeout=10) == "hello ann!"


def test_handle_result_raises_the_failure_of_an_archived_task(app: Conveyor, worker: Worker) -> None:
    @app.task(max_retries=0)
    def doomed() -> None:
        raise RuntimeError("no luck")

    handle = doomed.enqueue()
    worker.run_until_idle()
    with pytest.raises(TaskFailed) as failure:
        handle.result(timeout=10)
    assert (failure.value.reason, failure.value.error) == ("failed", "RuntimeError: no luck")
    assert str(failure.value) == f"task {handle.id!r} archived (failed): RuntimeError: no luck"


def test_handle_result_of_a_cancelled_task_says_so_without_an_error(app: Conveyor, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    handle.cancel()
    with pytest.raises(TaskFailed) as failure:
        handle.result(timeout=0)
    assert (failure.value.reason, failure.value.error) == ("cancelled", None)
    assert str(failure.value) == f"task {handle.id!r} archived (cancelled)"  # no ": None"


def test_handle_result_times_out_while_the_task_is_unfinished(app: Conveyor, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0)


def test_handle_result_of_a_task_gone_says_where_it_may_have_gone(app: Conveyor, worker: Worker) -> None:
    """A result kept for no time (retention 0) read "task not found", as if it never existed."""

    @app.task(retention=0)
    def fleeting() -> int:
        return 1

    handle = fleeting.enqueue()
    worker.run_until_idle()
    with pytest.raises(TaskNotFound, match=r"\(deleted, or finished and past its retention; a retention of 0"):
        handle.result(timeout=0)


@pytest.mark.parametrize(("arguments", "error"), [({"timeout": -1}, ValueError), ({"poll": 0}, ValueError)])
def test_handle_result_refuses_a_bad_wait(
    app: Conveyor, greet: object, arguments: dict[str, float], error: type[Exception]
) -> None:
    """A negative timeout said "still pending after -1 s"."""
    with pytest.raises(error):
        app.enqueue("greet", args=["ann"]).result(**arguments)


def test_handle_result_takes_an_infinite_timeout_as_none(app: Conveyor, worker: Worker, greet: object) -> None:
    handle = app.enqueue("greet", args=["ann"])
    worker.run_until_idle()
    assert handle.result(timeout=math.inf) == "hello ann!"


def test_stats_counts_tasks_per_queue_and_state(app: Conveyor, worker: Worker, greet: object) -> None:
    app.enqueue("greet", args=["a"])
    app.enqueue("greet", args=["b"])
    app.enqueue("greet", args=["c"], delay=60)
    app.enqueue("greet", args=["d"], queue="other")
    worker.process_next()
    assert app.stats() == {
        "default": {"scheduled": 1, "pending": 1, "active": 0, "retry": 0, "completed": 1, "archived": 0, "total": 3},
        "other": {"scheduled": 0, "pending": 1, "active": 0, "retry": 0, "completed": 0, "archived": 0, "total": 1},
    }


def test_each_memory_app_is_its_own_isolated_broker(clock: FakeClock) -> None:
    first, second = Conveyor("memory://", clock=clock), Conveyor("memory://", clock=clock)
    first.enqueue("anything")
    assert second.stats() == {}
    assert first.stats()["default"]["total"] == 1
