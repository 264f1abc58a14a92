"""``Runner``: calls one prepared job's handler with the middleware around it, in the thread or on the
loop it is given (sync in the calling thread, async on the calling loop), and applies its timeout.

The executor (``executor.py``) decides outcomes; this module only adds the hooks and the timeout. The
one-line log of each state change is ``events.py``'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from conveyor.context import reset_current, set_current
from conveyor.errors import TaskTimeout
from conveyor.model import Outcome
from conveyor.worker.executor import Executor, Job
from conveyor.worker.middleware import Middleware, call_after, call_before, call_on_error

__all__ = ["Runner"]


def _handler_failed(exc: BaseException) -> bool:
    """Whether ``exc``, out of a handler's call, fails its task. Any ``Exception`` does. On the main
    thread, where a steppable worker (``process_next``, ``run_until_idle``) runs handlers in its
    caller's thread, nothing else does: Ctrl-C, ``sys.exit()`` from a signal handler and a test
    framework's outcomes (``pytest.fail``) belong to the caller. On a worker's own threads every
    ``BaseException`` does (``sys.exit()``, a library's ``FunctionTimedOut``: the thread must not end
    for it, nor the task wait out its lease), but a ``CancelledError`` of a cancel from outside (lease
    lost, shutdown, an operator's cancel: its asyncio task is being cancelled), which the pool handles."""
    if isinstance(exc, Exception):
        return True
    if threading.current_thread() is threading.main_thread():
        return False
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no loop running here
            return True
        return task is None or task.cancelling() == 0
    return True


def _check_late(started: float, timeout: float | None) -> None:
    """``TaskTimeout`` for a handler that returned past its ``timeout`` (it could not be stopped)."""
    if timeout is not None and time.monotonic() - started > timeout:
        raise TaskTimeout(f"handler ran past its {timeout} s timeout")


def _cancelled_from_outside(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``CancelledError`` of a cancel of the running asyncio task from outside."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop running here
        return False
    return task is not None and task.cancelling() > 0


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
            _check_late(started, job.options.timeout)
        except BaseException as exc:
            if not _handler_failed(exc):
                raise
            call_on_error(middleware, job, exc)
            outcome = self.executor.failed(job, _from_the_handler(exc))
        else:
            outcome = self.executor.succeeded(job, result)
        finally:
            reset_current(token)
        if middleware:
            call_after(middleware, job, self.executor.heard(job, outcome))
        return outcome

    async def run_async(self, job: Job) -> Outcome:
        """Run an async handler on the current loop, cancelled at its timeout. A cancellation from
        outside (lease lost, an operator's cancel, shutdown) propagates as ``CancelledError``: nothing
        is settled then, but middleware's ``after`` still hears how the run ended (``heard``), so
        what a hook opened in ``before`` (a span, a timer) is closed."""
        call_before(self.middleware, job)
        token = set_current(job)
        interrupted = False
        started = time.monotonic()
        try:
            result = await _await_with_timeout(job.fn(*job.args, **job.kwargs), job.options.timeout)
            # a handler that blocks the loop (time.sleep) cannot be cancelled: late, it fails as a sync one does
            _check_late(started, job.options.timeout)
        except BaseException as exc:
            if not _handler_failed(exc):
                interrupted = _cancelled_from_outside(exc)
                raise
            call_on_error(self.middleware, job, exc)
            outcome = self.executor.failed(job, _from_the_handler(exc))
        else:
            outcome = self.executor.succeeded(job, result)
        finally:
            reset_current(token)
            if interrupted and self.middleware:
                call_after(self.middleware, job, self.executor.interrupted(job))
        call_after(self.middleware, job, self.executor.heard(job, outcome))
        return outcome


async def _await_with_timeout(awaitable: Any, seconds: float | None) -> Any:
    if seconds is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise TaskTimeout(f"handler ran past its {seconds} s timeout") from None


def _run_coroutine(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even if this thread already runs a loop (not
    from inside an ``except``: a handler's error would carry "no running event loop" as its context)."""
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False
    if not in_loop:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


_ASYNCIO = os.path.dirname(asyncio.__file__)


def _from_the_handler(exc: BaseException) -> BaseException:
    """``exc`` with the frames it passed in this module and asyncio before the handler's call cut
    off its traceback: a stored traceback starts where the user's code does."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename != __file__ and not filename.startswith(_ASYNCIO):
            break
        tb = tb.tb_next
    return exc.with_traceback(tb)
