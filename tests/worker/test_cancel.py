"""Cancelling a running task, on every broker: an async handler gets ``CancelledError``; a sync one in a
thread sees ``ctx.cancelled`` and ``ctx.lease_lost``; either way the task ends archived ``cancelled``,
whatever the handler returns. (``--processes`` mode: ``tests/faults/test_worker_faults.py``.)"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor import ArchiveReason, Conveyor, TaskContext, TaskState, Worker
from conveyor.metrics import Metrics
from conveyor.model import Outcome, TaskRecord
from conveyor.testing import poll_until
from conveyor.worker.inflight import Held
from conveyor.worker.middleware import Middleware

from .conftest import Start, sleep_until_cancelled

#: Short leases so that a worker learns of a cancel fast: it does at its next heartbeat at the latest.
HEARTBEAT = 0.1
SETTINGS = {"lease_for": 2.0, "heartbeat_interval": HEARTBEAT}


@pytest.fixture
def app(broker_url: str) -> Iterator[Conveyor]:
    """An app on ``broker_url`` (memory, SQLite, Redis) on the system clock, for a live worker."""
    application = Conveyor(broker_url)
    yield application
    application.close()


def assert_cancelled(app: Conveyor, task_id: str) -> None:
    info = app.get(task_id)
    assert (info.state, info.archive_reason, info.result) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED, None)


def settled(worker: Worker) -> bool:
    """Nothing is held any more: the handler ended and its (fenced) outcome went through the acker."""
    return worker.runtime is not None and len(worker.runtime.inflight) == 0


def test_cancel_raises_cancelled_error_in_a_running_async_handler(
    app: Conveyor, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    started = threading.Event()
    seen: list[tuple[bool, bool]] = []

    @app.task
    async def waits(ctx: TaskContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append((ctx.cancelled, ctx.lease_lost))
            raise
        return "finished anyway"

    @app.task
    def after() -> str:
        return "ran"

    handle = waits.enqueue()
    worker = start_worker(app, **SETTINGS)
    assert started.wait(5)
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        assert handle.cancel() is TaskState.ARCHIVED
        poll_until(lambda: bool(seen), message="CancelledError in the async handler")
        assert seen == [(True, True)]
        poll_until(lambda: settled(worker), message="the slot freed")
    assert_cancelled(app, handle.id)
    assert after.enqueue().result(timeout=5) == "ran"
    # one line says it, not one from the heartbeat that found the cancel and one from the pool
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"task cancelled task_id={handle.id}")]
    assert len(lines) == 1, lines


class Heard(Middleware):
    """What the hooks were told: ("before", id, None) and (kind, id, reason) per ``after``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def before(self, ctx: TaskContext) -> None:
        self.calls.append(("before", ctx.task_id, None))

    def after(self, ctx: TaskContext, outcome: Outcome) -> None:
        self.calls.append((outcome.kind, ctx.task_id, outcome.reason))


@pytest.mark.parametrize("how", ["cancel", "stop", "stop, cleanup awaiting"])
def test_middleware_hears_how_an_async_handler_cancelled_from_outside_ended(
    app: Conveyor, start_worker: Start, how: str
) -> None:
    """An operator's cancel ends as the sync path reports it (archived ``cancelled``); a worker's
    stop past its grace as a release, which the metrics do not count, a handler's cleanup that
    awaits included (the loop lets it finish before it closes). Either way ``after`` runs, so what
    ``before`` opened is closed (the metrics' timer of the run among them)."""
    started, cleaned = threading.Event(), threading.Event()

    @app.task
    async def waits() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            if how == "stop, cleanup awaiting":
                await asyncio.sleep(0.3)
                cleaned.set()

    heard, metrics = Heard(), Metrics()
    timing = metrics.middleware()
    handle = waits.enqueue()
    worker = start_worker(app, middleware=[heard, timing], shutdown_grace=0.1, **SETTINGS)
    assert started.wait(5)
    if how == "cancel":
        handle.cancel()
    else:
        worker.stop()
    poll_until(lambda: len(heard.calls) == 2, message="after() of the cancelled run")
    kind, reason = ("archive", ArchiveReason.CANCELLED) if how == "cancel" else ("release", None)
    assert heard.calls == [("before", handle.id, None), (kind, handle.id, reason)]
    assert cleaned.is_set() is (how == "stop, cleanup awaiting")
    labels = {"queue": "default", "task": "waits"}
    processed = metrics.registry.get_sample_value("conveyor_tasks_processed_total", labels)
    assert processed == (1.0 if how == "cancel" else None)
    assert timing._started == {}


def test_middleware_hears_a_release_of_a_sync_handler_that_outlasted_the_grace(
    app: Conveyor, start_worker: Start
) -> None:
    """Its lease taken back at the end of the grace, the task is pending again: whatever the handler
    then returns is not settled, so ``after`` hears the release, which the metrics do not count."""
    started = threading.Event()

    @app.task
    def stubborn(ctx: TaskContext) -> str:
        started.set()
        while not ctx.lease_lost:
            time.sleep(0.01)
        return "done anyway"

    heard, metrics = Heard(), Metrics()
    handle = stubborn.enqueue()
    worker = start_worker(app, middleware=[heard, metrics.middleware()], shutdown_grace=0.1, **SETTINGS)
    assert started.wait(5)
    worker.stop()
    poll_until(lambda: len(heard.calls) == 2, message="after() of the released run")
    assert heard.calls == [("before", handle.id, None), ("release", handle.id, None)]
    # the handler learns of the release (lease_lost) before the release is written: it may come after
    poll_until(lambda: app.get(handle.id).state is TaskState.PENDING, message="the task released")
    labels = {"queue": "default", "task": "stubborn"}
    assert metrics.registry.get_sample_value("conveyor_tasks_processed_total", labels) is None


@pytest.mark.parametrize("raised", [KeyboardInterrupt, asyncio.CancelledError])
def test_a_steppable_worker_leaves_an_async_handlers_own_base_exception_to_its_caller(
    app: Conveyor, raised: type[BaseException]
) -> None:
    """On the caller's thread a handler's ``KeyboardInterrupt`` (or a ``CancelledError`` nobody sent
    from outside) is the caller's, for an async handler as for a sync one: no outcome, no ``after``."""

    @app.task
    async def interrupts() -> None:
        raise raised()

    heard = Heard()
    handle = interrupts.enqueue()
    with pytest.raises(raised):
        app.worker(middleware=[heard]).process_next()
    assert heard.calls == [("before", handle.id, None)]


def test_a_sync_handler_in_a_thread_sees_ctx_cancelled_and_its_return_is_discarded(
    app: Conveyor, start_worker: Start
) -> None:
    started = threading.Event()
    seen: list[tuple[bool, bool, bool]] = []

    @app.task
    def loops(ctx: TaskContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:  # a cooperative handler's work loop
            time.sleep(0.01)
        seen.append((ctx.cancelled, ctx.lease_lost, ctx.should_stop()))
        return "finished anyway"

    handle = loops.enqueue()
    worker = start_worker(app, **SETTINGS)
    assert started.wait(5)
    assert handle.cancel() is TaskState.ARCHIVED
    poll_until(lambda: bool(seen), message="the handler to see ctx.cancelled")
    assert seen == [(True, True, True)]
    poll_until(lambda: settled(worker), message="its outcome settled")
    assert_cancelled(app, handle.id)


def test_a_sync_handler_that_ignores_the_cancel_cannot_complete_the_task(app: Conveyor, start_worker: Start) -> None:
    started = threading.Event()
    release = threading.Event()

    @app.task
    def stubborn() -> str:
        started.set()
        release.wait(10)  # never looks at its context
        return "finished anyway"

    handle = stubborn.enqueue()
    worker = start_worker(app, **SETTINGS)
    assert started.wait(5)
    assert handle.cancel() is TaskState.ARCHIVED
    release.set()
    poll_until(lambda: settled(worker), message="its late success settled (fenced)")
    assert_cancelled(app, handle.id)
    assert worker.runtime is not None and worker.runtime.acker.processed == 0


def test_a_sync_handler_that_raises_after_the_cancel_is_not_retried(app: Conveyor, start_worker: Start) -> None:
    started = threading.Event()

    @app.task(max_retries=5)
    def fails(ctx: TaskContext) -> None:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.should_stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("interrupted")

    handle = fails.enqueue()
    worker = start_worker(app, **SETTINGS)
    assert started.wait(5)
    handle.cancel()
    poll_until(lambda: settled(worker), message="its failure settled (fenced)")
    assert_cancelled(app, handle.id)


#: A heartbeat too slow to matter: a worker that learns of a cancel sooner learned it from the broker.
SLOW_HEARTBEAT = {"lease_for": 60.0, "heartbeat_interval": 10.0}


@pytest.fixture
def announcing(app: Conveyor, broker_url: str) -> Conveyor:
    """``app`` on a broker that announces cancels (memory, Redis); SQLite has no push between
    processes: its workers learn of a cancel at their next heartbeat (the tests above)."""
    if broker_url.startswith("sqlite"):
        pytest.skip("SQLite does not announce cancels")
    return app


def test_a_worker_stops_an_async_handler_at_once_when_the_broker_announces_the_cancel(
    announcing: Conveyor, start_worker: Start
) -> None:
    app = announcing
    started = threading.Event()
    cancelled = threading.Event()

    @app.task
    async def waits() -> None:
        await sleep_until_cancelled(started, cancelled)

    handle = waits.enqueue()
    start_worker(app, **SLOW_HEARTBEAT)
    assert started.wait(5)
    at = time.monotonic()
    handle.cancel()
    poll_until(cancelled.is_set, timeout=2.0, message="CancelledError well before the next heartbeat")
    print(f"async handler cancelled {1000 * (time.monotonic() - at):.1f} ms after the cancel")  # noqa: T201


def test_a_cancelled_task_waiting_in_the_workers_buffer_never_starts(announcing: Conveyor, start_worker: Start) -> None:
    app = announcing
    ran: list[str] = []
    release = threading.Event()

    @app.task
    def first() -> None:
        ran.append("first")
        release.wait(10)

    @app.task
    def second() -> None:
        ran.append("second")

    first.enqueue()
    waiting = second.enqueue()
    worker = start_worker(app, concurrency=1, prefetch=1, **SLOW_HEARTBEAT)
    poll_until(lambda: ran, message="the first task to start")  # one claim may take both before it starts
    poll_until(lambda: waiting.status().state is TaskState.ACTIVE, message="the second task claimed into the buffer")
    assert ran == ["first"]
    waiting.cancel()
    assert worker.runtime is not None
    poll_until(
        lambda: worker.runtime is not None and worker.runtime.inflight.get(waiting.id) is None, message="dropped"
    )
    release.set()
    poll_until(lambda: settled(worker), message="the first task done")
    assert ran == ["first"]
    assert_cancelled(app, waiting.id)


class Reports:
    """A ``Reporter`` (what a ``--processes`` child tells its supervisor) that records what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.on_start: Callable[[Held], None] = lambda held: None

    def started(self, held: Held) -> None:
        self.events.append(("start", held.id))
        self.on_start(held)

    def cancelled(self, held: Held) -> None:
        self.events.append(("cancel", held.id))

    def finished(self, held: Held) -> None:
        self.events.append(("end", held.id))


@pytest.fixture
def run_reporting(live_app: Conveyor) -> Iterator[Callable[[Worker, Reports], None]]:
    """Run a worker of the memory ``live_app`` on a thread, reporting to ``Reports``; stopped at teardown."""
    running: list[tuple[Worker, threading.Thread]] = []

    def run(worker: Worker, reports: Reports) -> None:
        kwargs = {"install_signals": False, "reporter": reports}
        thread = threading.Thread(target=worker.run, kwargs=kwargs, daemon=True)
        thread.start()
        running.append((worker, thread))

    yield run
    for worker, thread in running:
        worker.stop()
        thread.join(10)


def test_a_task_cancelled_while_the_pool_starts_it_never_runs(
    live_app: Conveyor,
    run_reporting: Callable[[Worker, Reports], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heartbeat finds the lease gone while the pool prepares the task (forced: inside ``prepare``):
    the task must not start then, for it would run outside the inflight and unreported."""
    app = live_app
    ran: list[str] = []

    @app.task
    def first() -> None:
        ran.append("first")

    @app.task
    def second() -> None:
        ran.append("second")

    handle = first.enqueue()
    worker = app.worker(concurrency=1, poll_interval=0.02, lease_for=60.0, heartbeat_interval=10.0, freeze_heap=False)
    prepare = worker.executor.prepare

    def prepare_then_lose(record: TaskRecord) -> Any:
        prepared = prepare(record)
        if record.id == handle.id:
            assert worker.runtime is not None
            held = worker.runtime.inflight.get(record.id)
            assert held is not None and held.job is None  # the window: taken by the pool, not started
            handle.cancel()
            worker.runtime.heartbeat.lost(held)  # what the heartbeat does once it finds the lease gone
            second.enqueue()  # runs on this one executor thread once it is done with the first
        return prepared

    monkeypatch.setattr(worker.executor, "prepare", prepare_then_lose)
    reports = Reports()
    run_reporting(worker, reports)
    poll_until(lambda: "second" in ran, message="the next task run")
    assert ran == ["second"]
    assert ("start", handle.id) not in reports.events
    assert worker.runtime is not None and worker.runtime.inflight.get(handle.id) is None
    assert_cancelled(app, handle.id)


def test_a_task_cancelled_just_after_it_started_stays_held_and_its_cancel_is_reported(
    live_app: Conveyor, run_reporting: Callable[[Worker, Reports], None]
) -> None:
    """The other order (forced: as the pool reports the start): the task stays held until it ends and its
    cancel is reported, so a ``--processes`` supervisor stops a handler that does not return."""
    app = live_app
    release = threading.Event()
    started = threading.Event()

    @app.task
    def stubborn() -> None:
        started.set()
        release.wait(10)  # never looks at its context

    handle = stubborn.enqueue()
    worker = app.worker(poll_interval=0.02, lease_for=60.0, heartbeat_interval=10.0, freeze_heap=False)
    reports = Reports()

    def cancel_at_start(held: Held) -> None:
        assert worker.runtime is not None
        handle.cancel()
        worker.runtime.heartbeat.lost(held)

    reports.on_start = cancel_at_start
    run_reporting(worker, reports)
    assert started.wait(5)
    assert reports.events == [("start", handle.id), ("cancel", handle.id)]
    assert worker.runtime is not None and worker.runtime.inflight.get(handle.id) is not None
    release.set()
    poll_until(lambda: settled(worker), message="its late return settled (fenced)")
    assert reports.events[-1] == ("end", handle.id)
    assert_cancelled(app, handle.id)
