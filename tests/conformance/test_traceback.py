"""The traceback of a task's latest failure (``TaskInfo.traceback``): kept bounded with the failure,
replaced by the next failure's, and never stored for a task that did not fail."""

from __future__ import annotations

from conveyor import ArchiveReason, Conveyor, FakeClock, TaskState, Worker
from conveyor.outcomes import CUT_MARKER, MAX_TRACEBACK_CHARS


class Deep(Exception):
    pass


class Shallow(Exception):
    pass


def recurse_then_raise(depth: int) -> None:
    if depth == 0:
        raise Deep("x" * 500)  # with 200 frames above it: over the frame bound
    recurse_then_raise(depth - 1)


def raise_shallow() -> None:
    raise Shallow("second time")


def test_the_latest_failures_traceback_is_kept_bounded_and_replaced(
    app: Conveyor, producer: Conveyor, clock: FakeClock
) -> None:
    calls: list[int] = []

    @app.task(name="flaky", max_retries=1)
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            recurse_then_raise(200)
        raise_shallow()

    worker = app.worker()
    task_id = producer.enqueue("flaky").id
    assert worker.process_next()
    info = producer.get(task_id)  # a reader without the handler sees it too
    assert info.state is TaskState.RETRY
    first = info.traceback
    assert first is not None
    assert CUT_MARKER in first and len(first) <= MAX_TRACEBACK_CHARS
    assert "recurse_then_raise" in first and first.endswith("Deep: " + "x" * 500 + "\n")
    assert info.errors[-1].error.startswith("Deep: x")  # the error history keeps its shape
    clock.advance(3600)
    assert worker.process_next()
    info = producer.get(task_id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.FAILED)
    second = info.traceback
    assert second is not None and CUT_MARKER not in second
    assert "raise_shallow" in second and "Shallow: second time" in second
    assert "recurse_then_raise" not in second  # replaced, not appended
    assert info.errors[-1].error == "Shallow: second time"


def test_a_completed_task_keeps_no_traceback(app: Conveyor, worker: Worker) -> None:
    @app.task(name="fine")
    def fine() -> int:
        return 1

    task_id = app.enqueue("fine").id
    assert worker.process_next()
    info = app.get(task_id)
    assert (info.state, info.traceback) == (TaskState.COMPLETED, None)


def test_an_external_consumers_failure_without_a_traceback_clears_the_earlier_one(
    app: Conveyor, clock: FakeClock
) -> None:
    task_id = app.enqueue("external", max_retries=3).id
    claimed = app.claim()
    assert claimed is not None
    try:
        raise_shallow()
    except Shallow as exc:
        claimed.fail(exc)
    assert "raise_shallow" in (app.get(task_id).traceback or "")
    clock.advance(3600)
    claimed = app.claim()
    assert claimed is not None
    claimed.fail("told by a message only")
    info = app.get(task_id)
    assert (info.last_error, info.traceback) == ("told by a message only", None)


def test_a_traceback_starts_at_the_handler_with_no_context_of_the_runtimes_own(app: Conveyor, worker: Worker) -> None:
    """It began with the worker's own frames (``runner.py``, and asyncio's for an async handler), and
    an async handler's error run by a steppable worker carried "no running event loop" as context."""

    @app.task(max_retries=0)
    def sync_fails() -> None:
        raise_shallow()

    @app.task(max_retries=0)
    async def async_fails() -> None:
        raise_shallow()

    ids = [sync_fails.enqueue().id, async_fails.enqueue().id]
    worker.run_until_idle()
    for task_id, handler in zip(ids, ("sync_fails", "async_fails"), strict=True):
        trace = app.get(task_id).traceback
        assert trace is not None
        first_frame = trace.splitlines()[1]
        assert first_frame.endswith(f", in {handler}"), trace
        assert "During handling" not in trace and "conveyor/worker" not in trace, trace
