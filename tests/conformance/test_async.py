"""``async def`` handlers work everywhere, including the steppable ``process_next()``."""

from __future__ import annotations

import asyncio
import time

from conveyor import Conveyor, FakeClock, TaskState, Worker, current_task


def test_async_handler_runs_in_process_next(app: Conveyor, worker: Worker) -> None:
    @app.task
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"body of {url}"

    handle = fetch.enqueue("https://example.org")
    assert worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.result) == (TaskState.COMPLETED, "body of https://example.org")


def test_async_handler_failure_is_retried(app: Conveyor, clock: FakeClock, worker: Worker) -> None:
    @app.task
    async def broken() -> None:
        await asyncio.sleep(0)
        raise ConnectionError("reset")

    handle = broken.enqueue()
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.last_error, info.next_run_at) == (
        TaskState.RETRY,
        "ConnectionError: reset",
        clock.now() + 1.0,
    )


def test_async_handler_past_its_timeout_is_cancelled_and_retried(app: Conveyor, worker: Worker) -> None:
    cancelled: list[bool] = []

    @app.task(timeout=0.01)
    async def hangs() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    handle = hangs.enqueue()
    worker.process_next()
    info = app.get(handle.id)
    assert cancelled == [True]
    assert info.state is TaskState.RETRY
    assert info.last_error is not None and info.last_error.startswith("TaskTimeout")


def test_async_handler_blocking_its_loop_past_its_timeout_fails_as_a_sync_one(app: Conveyor, worker: Worker) -> None:
    """A blocking call (``time.sleep``) holds the loop, so nothing can cancel it at its timeout: its
    late result fails with ``TaskTimeout``, not completed as if in time."""

    @app.task(timeout=0.01, max_retries=0)
    async def blocks() -> str:
        time.sleep(0.05)  # noqa: ASYNC251 - the blocking call under test
        return "late"

    handle = blocks.enqueue()
    worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.result) == (TaskState.ARCHIVED, None)
    assert info.last_error == "TaskTimeout: handler ran past its 0.01 s timeout"


def test_async_handler_sees_its_own_task_context(app: Conveyor, worker: Worker) -> None:
    @app.task
    async def who_am_i() -> list[object]:
        await asyncio.sleep(0)
        ctx = current_task()
        return [ctx.task_id, ctx.name, ctx.attempt]

    handle = who_am_i.enqueue()
    worker.process_next()
    assert app.get(handle.id).result == [handle.id, "who_am_i", 1]


def test_process_next_runs_an_async_handler_even_from_inside_a_running_event_loop(
    app: Conveyor, worker: Worker
) -> None:
    @app.task
    async def nested() -> int:
        await asyncio.sleep(0)
        return 7

    handle = nested.enqueue()

    async def main() -> bool:
        return worker.process_next()

    assert asyncio.run(main())
    assert app.get(handle.id).result == 7
