"""What a running handler can know and do about its own execution.

A handler gets a :class:`TaskContext` either as its first parameter (annotated ``TaskContext``) or
from :func:`current_task` anywhere below it (a ``contextvars`` variable, so it is right in threads and
in asyncio tasks alike).
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable
from typing import Any, Protocol

from conveyor._validate import check_positive
from conveyor.errors import LeaseLost
from conveyor.model import LeaseStatus, TaskInfo

__all__ = ["TaskContext", "current_task", "wants_context"]


class HasContext(Protocol):
    """What a runtime may set as the current task instead of a context: one it builds on first use."""

    @property
    def ctx(self) -> TaskContext: ...


_current: contextvars.ContextVar[TaskContext | HasContext] = contextvars.ContextVar("conveyor_current_task")


class TaskContext:
    """The running task: ``task_id``, ``name``, ``queue``, ``attempt``; ``lease_lost``, ``cancelled``;
    ``extend()``.

    ``info`` (the full ``TaskInfo``) is decoded on first use only. The flags are plain attributes:
    set by the worker's threads, read by the handler (a bool store is atomic in CPython).
    ``extend`` is the worker's call to ``Broker.extend`` for this lease (None: the lease is lost); the
    context applies what it learns itself, so that callable never needs to refer back to the context
    (a context in a reference cycle would live until the garbage collector's next pass instead of
    being freed when its task ends, which costs a busy worker collector CPU per task).
    ``was_cancelled`` (optional) tells, once ``extend`` found the lease lost, whether an operator's
    cancel took it (then ``cancelled`` is set too).
    """

    __slots__ = (
        "_cancel",
        "_extend",
        "_info",
        "_lease_lost",
        "_timed_out",
        "_was_cancelled",
        "attempt",
        "name",
        "queue",
        "task_id",
    )

    def __init__(
        self,
        info: TaskInfo | Callable[[], TaskInfo],
        extend: Callable[[float], LeaseStatus | None],
        *,
        task_id: str = "",
        name: str = "",
        queue: str = "",
        attempt: int = 0,
        was_cancelled: Callable[[], bool] | None = None,
    ) -> None:
        if isinstance(info, TaskInfo):
            self._info: TaskInfo | Callable[[], TaskInfo] = info
            task_id, name, queue, attempt = info.id, info.name, info.queue, info.attempts
        else:
            self._info = info
        self.task_id = task_id
        self.name = name
        self.queue = queue
        #: 1 on the first execution, 2 on the second, ...
        self.attempt = attempt
        self._extend = extend
        self._was_cancelled = was_cancelled
        self._lease_lost = False
        self._cancel = False
        self._timed_out = False

    @property
    def info(self) -> TaskInfo:
        """The task as it was claimed (arguments decoded, retry budget resolved)."""
        if not isinstance(self._info, TaskInfo):
            self._info = self._info()
        return self._info

    @property
    def lease_lost(self) -> bool:
        """True once this worker no longer holds the task: stop, nothing you write will be committed."""
        return self._lease_lost

    @property
    def cancelled(self) -> bool:
        """True once an operator cancelled this task: stop. It is archived ``cancelled`` already, and
        nothing the handler returns or raises changes that (``lease_lost`` is True as well)."""
        return self._cancel

    @property
    def cancel_requested(self) -> bool:
        """The same as ``cancelled`` (its earlier name)."""
        return self._cancel

    @property
    def timed_out(self) -> bool:
        """True once a sync handler ran past its timeout (Python cannot interrupt a thread: stop)."""
        return self._timed_out

    def should_stop(self) -> bool:
        """True if the handler should stop cooperatively (lease lost, cancelled, timed out)."""
        return self._lease_lost or self._cancel or self._timed_out

    def extend(self, seconds: float) -> float:
        """Hold the lease ``seconds`` longer (from now); returns the new deadline. Raises LeaseLost."""
        check_positive("seconds", seconds)
        status = self._extend(float(seconds))
        if status is None:
            if self._was_cancelled is not None and self._was_cancelled():
                self.mark_cancelled()  # set first: the handler may read it as soon as lease_lost is set
            self.mark_lease_lost()
            raise LeaseLost(self.task_id)
        if status.cancel_requested:  # a cancel stored before cancel revoked leases (older versions)
            self.mark_cancelled()
        return status.expires_at

    def mark_lease_lost(self) -> None:
        """Set ``lease_lost`` (the worker's heartbeat or ``extend`` found the lease gone)."""
        self._lease_lost = True

    def mark_cancelled(self) -> None:
        """Set ``cancelled`` (an operator cancelled the task; ``mark_cancel_requested`` is its old name)."""
        self._cancel = True

    mark_cancel_requested = mark_cancelled

    def mark_timed_out(self) -> None:
        """Set ``timed_out`` (the handler ran past its timeout)."""
        self._timed_out = True

    def __repr__(self) -> str:
        return f"TaskContext(task_id={self.task_id!r}, name={self.name!r}, attempt={self.attempt})"


def current_task() -> TaskContext:
    """The context of the task running in this thread / asyncio task. RuntimeError outside a task."""
    try:
        current = _current.get()
    except LookupError:
        raise RuntimeError("current_task() called outside a running Conveyor task") from None
    return current if isinstance(current, TaskContext) else current.ctx


def set_current(current: TaskContext | HasContext) -> contextvars.Token[TaskContext | HasContext]:
    """Make ``current`` the running task's context (or the source of it) in this thread / asyncio task."""
    return _current.set(current)


def reset_current(token: contextvars.Token[TaskContext | HasContext]) -> None:
    _current.reset(token)


def wants_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s first parameter is annotated ``TaskContext`` (then the worker passes one)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return False
    annotation = params[0].annotation
    if annotation is TaskContext:
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "TaskContext"
