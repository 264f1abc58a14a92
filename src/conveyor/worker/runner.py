"""Running one prepared job with the middleware around it, and the one-line logs of each state change.

The executor (``executor.py``) decides outcomes; this module only adds the hooks, measures the
duration and logs. Log lines are ``key=value`` text on ``conveyor.worker``, and carry the same fields
as ``extra={"conveyor": {...}}`` for structured handlers. A task's start and its success are DEBUG
(two INFO lines per task cost a no-op drain more than half its worker CPU); every other change of
state (retry, archive, lease lost, cancelled) is INFO, one line each. What a worker did at
INFO is its periodic summary (``summary.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import time
from collections.abc import Sequence
from typing import Any

from conveyor.context import reset_current, set_current
from conveyor.errors import TaskTimeout
from conveyor.model import Outcome, TaskRecord
from conveyor.worker.executor import Executor, Job
from conveyor.worker.middleware import Middleware, call_after, call_before, call_on_error

__all__ = ["ROUTINE", "Runner", "event_level", "log_event"]

log = logging.getLogger("conveyor.worker")

_EVENT = {"complete": "completed", "retry": "retry", "archive": "archived", "release": "released"}

#: Events logged at DEBUG: those of every task, and releases (a shutdown logs one INFO line for all
#: it releases; an unknown task name, a WARNING). The others are logged at INFO.
ROUTINE = frozenset({"started", "completed", "released"})


def event_level(event: str) -> int:
    return logging.DEBUG if event in ROUTINE else logging.INFO


def log_event(record: TaskRecord, event: str, duration: float | None = None, **more: Any) -> None:
    """One structured line: ``task <event> id=... name=... queue=... attempt=... duration=...``, at
    DEBUG for a ``ROUTINE`` event (a start, a success), else at INFO."""
    level = event_level(event)
    if not log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "event": event,
        "task_id": record.id,
        "name": record.name,
        "queue": record.queue,
        "attempt": record.attempts,
    }
    if duration is not None:
        fields["duration"] = round(duration, 6)
    fields.update({k: v for k, v in more.items() if v is not None})
    text = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
    log.log(level, "task %s %s", event, text, extra={"conveyor": fields})


def outcome_event(outcome: Outcome) -> str:
    return _EVENT.get(outcome.kind, outcome.kind)


class Runner:
    """Runs jobs: ``run_sync`` in the calling thread, ``run_async`` on the calling event loop."""

    def __init__(self, executor: Executor, middleware: Sequence[Middleware] = ()) -> None:
        self.executor = executor
        self.middleware = tuple(middleware)

    def run_sync(self, job: Job) -> Outcome:
        """Run a sync handler here (an async one on a private loop). A sync handler cannot be
        interrupted: its timeout is checked when it returns (a late result fails with TaskTimeout)."""
        if job.is_async:
            outcome: Outcome = _run_coroutine(self.run_async(job))
            return outcome
        middleware = self.middleware  # usually none: then no hook calls at all
        if middleware:
            call_before(middleware, job)
        token = set_current(job)  # current_task() builds the context if the handler asks for it
        started = time.monotonic()
        try:
            result = job.fn(*job.args, **job.kwargs)
            if result is not None and inspect.isawaitable(result):  # None: most handlers, no ABC check
                result = _run_coroutine(_await_with_timeout(result, job.options.timeout))
            timeout = job.options.timeout
            if timeout is not None and time.monotonic() - started > timeout:
                raise TaskTimeout(f"handler ran past its {timeout} s timeout")
        except Exception as exc:
            call_on_error(middleware, job, exc)
            outcome = self.executor.failed(job, exc)
        else:
            outcome = self.executor.succeeded(job, result)
        finally:
            reset_current(token)
        if middleware:
            call_after(middleware, job, outcome)
        return outcome

    async def run_async(self, job: Job) -> Outcome:
        """Run an async handler on the current loop, cancelled at its timeout. A cancellation from
        outside (lease lost, shutdown) propagates as ``CancelledError``: there is no outcome then."""
        call_before(self.middleware, job)
        token = set_current(job)
        try:
            result = await _await_with_timeout(job.fn(*job.args, **job.kwargs), job.options.timeout)
        except Exception as exc:
            call_on_error(self.middleware, job, exc)
            outcome = self.executor.failed(job, exc)
        else:
            outcome = self.executor.succeeded(job, result)
        finally:
            reset_current(token)
        call_after(self.middleware, job, outcome)
        return outcome


async def _await_with_timeout(awaitable: Any, seconds: float | None) -> Any:
    if seconds is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise TaskTimeout(f"handler ran past its {seconds} s timeout") from None


def _run_coroutine(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even if this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
