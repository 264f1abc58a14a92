"""The composed runtime with the memory broker: concurrency, async handlers, heartbeat, fencing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from conveyor import BrokerPolicy, Conveyor, FakeClock, Fixed, TaskContext, TaskState, Worker, current_task
from conveyor.model import ArchiveReason
from conveyor.serializers import decode
from conveyor.testing import SpyBroker, poll_until
from conveyor.worker.executor import Job
from conveyor.worker.inflight import Held

from .conftest import Start, sleep_until_cancelled


def test_sync_handlers_run_concurrently_up_to_concurrency(live_app: Conveyor, start_worker: Start) -> None:
    barrier = threading.Barrier(4, timeout=5)

    @live_app.task
    def meet() -> int:
        return barrier.wait()

    handles = [meet.enqueue() for _ in range(4)]
    start_worker(concurrency=4)
    assert sorted(h.result(timeout=5) for h in handles) == [0, 1, 2, 3]


def test_async_handlers_run_concurrently_on_one_loop(live_app: Conveyor, start_worker: Start) -> None:
    barrier = asyncio.Barrier(5)
    threads: set[str] = set()

    @live_app.task
    async def meet() -> int:
        threads.add(threading.current_thread().name)
        return await asyncio.wait_for(barrier.wait(), 5)

    handles = [meet.enqueue() for _ in range(5)]
    start_worker(concurrency=5)
    results: list[Any] = [h.result(timeout=5) for h in handles]  # typed handles of async tasks: see report
    assert sorted(results) == [0, 1, 2, 3, 4]
    assert threads == {"conveyor-loop"}


def test_handler_gets_ctx_and_current_task(live_app: Conveyor, start_worker: Start) -> None:
    @live_app.task
    def who(ctx: TaskContext) -> list[object]:
        return [ctx.task_id, current_task().task_id, ctx.attempt]

    handle = who.enqueue()
    start_worker()
    assert handle.result(timeout=5) == [handle.id, handle.id, 1]


def prepared(app: Conveyor, worker: Worker) -> Job:
    """The next task of ``worker``'s queues, claimed and prepared (not run)."""
    (record,) = app.broker.claim(list(worker.queues), app.now(), 30.0, 1)
    job = worker.executor.prepare(record)
    assert isinstance(job, Job)
    return job


def test_a_task_context_is_built_only_when_something_asks_for_it() -> None:
    app = Conveyor("memory://", clock=FakeClock(1000.0))
    seen: list[TaskContext] = []

    @app.task
    def quiet() -> str:
        return "ok"

    @app.task
    def asks(twice: bool) -> list[object]:
        ctx = current_task()
        seen.append(ctx)
        if twice:
            seen.append(current_task())
        return [ctx.task_id, ctx.name, ctx.attempt, ctx.info.args, ctx.extend(60.0)]

    worker = app.worker()
    quiet.enqueue()
    job = prepared(app, worker)
    assert worker.runner.run_sync(job).kind == "complete"
    assert job.built_ctx is None  # the handler never asked: no context was made for it

    handle = asks.enqueue(True)
    job = prepared(app, worker)
    outcome = worker.runner.run_sync(job)
    assert outcome.result is not None and decode(outcome.result) == [handle.id, "asks", 1, [True], 1060.0]
    assert seen[0] is seen[1] is job.built_ctx  # one context per execution, whoever asks first
    assert seen[0].lease_lost is False


def test_what_a_service_tells_a_task_before_it_asks_for_its_context_is_in_that_context() -> None:
    app = Conveyor("memory://", clock=FakeClock(1000.0))
    seen: list[tuple[bool, bool, bool]] = []

    @app.task(max_retries=3)
    def asks() -> None:
        ctx = current_task()
        seen.append((ctx.lease_lost, ctx.cancel_requested, ctx.timed_out))
        raise RuntimeError("stopping as asked")

    worker = app.worker()
    asks.enqueue()
    job = prepared(app, worker)
    held = Held(job.record, job.token)
    held.begin(job)
    held.mark_lost()  # what the heartbeat's thread does: before the handler asked for the context
    job.ctx.mark_cancel_requested()
    outcome = worker.runner.run_sync(job)
    assert seen == [(True, True, False)]
    assert (outcome.kind, outcome.reason) == ("archive", ArchiveReason.CANCELLED)  # not retried: cancelled


def test_heartbeat_extends_leases_of_running_tasks(live_app: Conveyor, start_worker: Start) -> None:
    release = threading.Event()

    @live_app.task
    def long() -> str:
        release.wait(5)
        return "done"

    handle = long.enqueue()
    start_worker(lease_for=0.3, heartbeat_interval=0.05, reaper_interval=0.05)
    poll_until(lambda: handle.status().state is TaskState.ACTIVE, message="task start")
    first = handle.status().lease_expires_at
    assert first is not None
    poll_until(lambda: (handle.status().lease_expires_at or 0) > first + 0.3, message="lease extended")
    release.set()
    assert handle.result(timeout=5) == "done"
    assert handle.status().attempts == 1
    assert handle.status().stalls == 0


def test_lost_lease_is_flagged_and_its_result_fenced() -> None:
    clock = FakeClock(1000.0)
    spy = SpyBroker.from_url("memory://", BrokerPolicy(max_stalls=5))
    app = Conveyor(broker=spy, clock=clock)
    seen: list[tuple[int, bool]] = []
    first_started = threading.Event()

    @app.task
    def slow(ctx: TaskContext) -> int:
        if ctx.attempt == 1:
            first_started.set()
            poll_until(lambda: ctx.lease_lost, message="lease loss noticed")
        seen.append((ctx.attempt, ctx.lease_lost))
        return ctx.attempt

    handle = slow.enqueue()
    worker = app.worker(
        lease_for=10.0, heartbeat_interval=0.02, reaper_interval=0.02, poll_interval=0.02, freeze_heap=False
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        assert first_started.wait(5)
        # The lease expires and is reclaimed in one step: the worker's calls wait, so the heartbeat cannot
        # extend the expired-but-still-current lease in between (the contract allows that extension).
        with spy.paused():
            clock.advance(11.0)
            assert spy.reap(clock.now()) == 1
        assert handle.result(timeout=5) == 2
        poll_until(lambda: len(seen) == 2, message="both executions")
        assert sorted(seen) == [(1, True), (2, False)]
        assert handle.status().attempts == 2
    finally:
        worker.stop()
        thread.join(10)


@pytest.mark.parametrize(
    ("settings", "advance"),
    [
        pytest.param(
            {"lease_for": 10.0, "heartbeat_interval": 0.02, "reaper_interval": 0.02, "poll_interval": 0.02},
            11.0,
            id="heartbeat-or-claim-first",
        ),
        # The heartbeat kept out (its first tick is long past the test), so the claim is always first.
        pytest.param(
            {"lease_for": 100.0, "heartbeat_interval": 60.0, "poll_interval": 0.02, "shutdown_grace": 1.0},
            101.0,
            id="claimed-again-first",
        ),
    ],
)
def test_async_handler_is_cancelled_when_its_lease_is_lost(settings: dict[str, Any], advance: float) -> None:
    """Whoever finds the lease lost first cancels the old handler: the heartbeat (its extend fails) or the
    worker's own fetcher claiming the reclaimed task again (``Inflight.add``, whose pool done callback on
    the old future then runs in the fetcher's thread: it once deadlocked there, and the old handler was
    never cancelled)."""
    clock = FakeClock(1000.0)
    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy, clock=clock)
    started = threading.Event()
    cancelled = threading.Event()

    @app.task
    async def waits(ctx: TaskContext) -> str:
        if ctx.attempt > 1:
            return "second"
        await sleep_until_cancelled(started, cancelled)
        return "first"

    handle = waits.enqueue()
    worker = app.worker(**settings, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        assert started.wait(5)
        with spy.paused():  # expire and reclaim atomically: the worker's reaper may not take it first
            clock.advance(advance)
            assert spy.reap(clock.now()) == 1
        assert cancelled.wait(5), "the old handler kept running"
        result: Any = handle.result(timeout=5)
        assert result == "second"
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive(), "the worker did not stop"


def test_async_handler_is_cancelled_when_its_lease_is_lost_while_it_is_being_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heartbeat may find the lease lost between the pool submitting the coroutine to the loop and
    recording its future on the held task: then ``mark_lost`` has no future to cancel, and the pool must
    cancel it itself. The interleaving is forced: the lease is marked lost right after the submission."""
    app = Conveyor("memory://", clock=FakeClock(1000.0))
    started = threading.Event()
    cancelled = threading.Event()

    @app.task
    async def waits() -> None:
        await sleep_until_cancelled(started, cancelled)

    waits.enqueue()
    worker = app.worker(lease_for=10.0, poll_interval=0.02, freeze_heap=False)
    submit = asyncio.run_coroutine_threadsafe

    def submit_then_lose(coro: Any, loop: asyncio.AbstractEventLoop) -> Any:
        future = submit(coro, loop)
        assert worker.runtime is not None
        (held,) = worker.runtime.inflight.snapshot()
        assert held.future is None  # the window: submitted, not yet recorded
        held.mark_lost()
        return future

    monkeypatch.setattr(asyncio, "run_coroutine_threadsafe", submit_then_lose)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        assert started.wait(5)
        assert cancelled.wait(5), "the handler kept running after its lease was lost"
    finally:
        worker.stop()
        thread.join(10)


def test_a_task_whose_lease_is_lost_while_it_is_being_prepared_never_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin of the test above for a task not started yet: a lease marked lost after the pool took the
    task and before it started (forced: right after ``prepare``) keeps it from starting, and it is dropped."""
    app = Conveyor("memory://", clock=FakeClock(1000.0))
    seen: list[bool] = []

    @app.task
    def looks() -> None:
        seen.append(current_task().lease_lost)

    looks.enqueue()
    worker = app.worker(lease_for=10.0, poll_interval=0.02, freeze_heap=False)
    prepare = worker.executor.prepare
    prepared_once = threading.Event()

    def prepare_then_lose(record: Any) -> Any:
        job = prepare(record)
        assert worker.runtime is not None
        (held,) = worker.runtime.inflight.snapshot()
        held.mark_lost()
        prepared_once.set()
        return job

    monkeypatch.setattr(worker.executor, "prepare", prepare_then_lose)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        assert prepared_once.wait(5)
        poll_until(lambda: worker.runtime is not None and len(worker.runtime.inflight) == 0, message="dropped")
        assert seen == []
    finally:
        worker.stop()
        thread.join(10)
    assert seen == []


def test_async_handler_is_cancelled_at_its_timeout(live_app: Conveyor, start_worker: Start) -> None:
    @live_app.task(timeout=0.05, max_retries=0)
    async def hangs() -> None:
        await asyncio.sleep(30)

    handle = hangs.enqueue()
    start_worker()
    poll_until(lambda: handle.status().state is TaskState.ARCHIVED, message="archived")
    assert (handle.status().last_error or "").startswith("TaskTimeout")


def test_reaper_reclaims_expired_leases_with_no_traffic(live_app: Conveyor, start_worker: Start) -> None:
    @live_app.task
    def noop() -> None: ...

    handle = noop.enqueue()
    lease = live_app.claim(lease_for=0.1)
    assert lease is not None
    start_worker(queues=["elsewhere"], reaper_interval=0.02)
    poll_until(lambda: handle.status().state is TaskState.PENDING, message="reclaimed")
    assert handle.status().stalls == 1


def test_worker_registers_itself_and_unregisters_on_stop(live_app: Conveyor, start_worker: Start) -> None:
    worker = start_worker(queues=["a", "b"], concurrency=3)
    poll_until(lambda: len(live_app.broker.workers(live_app.now())) == 1, message="registered")
    info = live_app.broker.workers(live_app.now())[0]
    assert (info.queues, info.concurrency) == (("a", "b"), 3)
    worker.stop()
    poll_until(lambda: worker.runtime is not None and worker.runtime.stopped.is_set(), message="stopped")
    assert live_app.broker.workers(live_app.now()) == []


def test_promoter_moves_due_retries_back_to_pending(live_app: Conveyor, start_worker: Start) -> None:
    calls: list[int] = []

    @live_app.task
    def flaky(ctx: TaskContext) -> int:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("once")
        return ctx.attempt

    handle = flaky.with_options(backoff=Fixed(0.05)).enqueue()
    start_worker(promoter_interval=0.02)
    assert handle.result(timeout=5) == 2


def test_sync_handler_past_its_timeout_sees_timed_out_and_fails_with_task_timeout(
    live_app: Conveyor, start_worker: Start
) -> None:
    saw_flag = threading.Event()

    @live_app.task(timeout=0.1, max_retries=0)
    def cooperative() -> str:
        ctx = current_task()
        deadline = time.monotonic() + 5.0
        while not ctx.should_stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        if ctx.timed_out:
            saw_flag.set()
        return "stopped"

    handle = cooperative.enqueue()
    start_worker(heartbeat_interval=0.05, lease_for=2.0)
    poll_until(lambda: handle.status().state is TaskState.ARCHIVED, message="timed-out task archived")
    assert saw_flag.is_set()
    assert (handle.status().last_error or "").startswith("TaskTimeout")
