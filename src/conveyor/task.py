"""Registered tasks and handles to enqueued ones, typed with the handler's signature (ParamSpec)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from conveyor._validate import check_positive, check_seconds
from conveyor.errors import ResultTimeout, TaskFailed, TaskNotFound
from conveyor.model import TaskInfo, TaskState
from conveyor.options import TaskOptions, check_enqueue_options

__all__ = ["BoundTask", "Task", "TaskHandle"]

P = ParamSpec("P")
R = TypeVar("R")


class _Cancels(Protocol):
    def cancel(self, task_id: str) -> TaskState: ...


class Producer(Protocol):
    """What tasks and handles use of the app (``Conveyor`` is one): enqueue by name, read, cancel."""

    def enqueue(
        self, name: str, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
    ) -> TaskHandle[Any]: ...

    def enqueue_many(
        self, name: str, calls: Iterable[tuple[Iterable[Any], dict[str, Any]]], **options: Any
    ) -> list[TaskHandle[Any]]: ...

    def get(self, task_id: str) -> TaskInfo: ...

    @property
    def inspect(self) -> _Cancels: ...


#: Why a handle's task is not found: it was enqueued, so it went since.
_GONE = "deleted, or finished and past its retention; a retention of 0 keeps no result to read"


class TaskHandle(Generic[R]):
    """A reference to an enqueued task: ``id``, ``status()``, ``result()``, ``cancel()``."""

    __slots__ = ("_app", "id")

    def __init__(self, app: Producer, task_id: str) -> None:
        self._app = app
        self.id = task_id

    def status(self) -> TaskInfo:
        """The task as stored now. Raises TaskNotFound if it is gone."""
        return self._app.get(self.id)

    def result(self, timeout: float | None = None, poll: float = 0.01) -> R:
        """Wait (real time, at most ``timeout`` seconds; None: forever) until the task is finished.

        Returns the handler's result; raises TaskFailed if the task ended archived, ResultTimeout on
        timeout, TaskNotFound if the task is gone (deleted, or past its retention).
        """
        if timeout is not None and timeout != math.inf:  # inf: as None, forever
            check_seconds("timeout", timeout)
        check_positive("poll", poll)
        deadline = None if timeout is None or timeout == math.inf else time.monotonic() + timeout
        wait = min(poll, 0.001)
        while True:
            try:
                info = self._app.get(self.id)
            except TaskNotFound:  # it was enqueued: it went since, and "not found" alone reads as never
                raise TaskNotFound(self.id, _GONE) from None
            if info.state is TaskState.COMPLETED:
                return info.result  # type: ignore[no-any-return]
            if info.state is TaskState.ARCHIVED:
                raise TaskFailed(info.id, info.archive_reason and info.archive_reason.value, info.last_error)
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(f"task {self.id!r} still {info.state.value} after {timeout} s")
            time.sleep(wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic())))
            wait = min(wait * 2, poll)

    def cancel(self) -> TaskState:
        """Cancel the task, even while it runs (see ``Inspector.cancel``); returns its state after the call."""
        return self._app.inspect.cancel(self.id)

    def __repr__(self) -> str:
        return f"TaskHandle({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskHandle) and other.id == self.id and other._app is self._app

    def __hash__(self) -> int:
        return hash(self.id)


class BoundTask(Generic[P, R]):
    """A task with per-enqueue options applied: ``task.with_options(delay=30).enqueue(...)``."""

    def __init__(self, task: Task[P, R], options: dict[str, Any]) -> None:
        self.task = task
        self.options = check_enqueue_options(options)

    def with_options(self, **options: Any) -> BoundTask[P, R]:
        """These options with ``options`` over them (the later win)."""
        return BoundTask(self.task, {**self.options, **options})

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue one call with these options (``Task.enqueue`` says what is checked and raised)."""
        handle: TaskHandle[R] = self.task.app.enqueue(self.task.name, args=list(args), kwargs=kwargs, **self.options)
        return handle

    def enqueue_many(self, calls: Iterable[tuple[Iterable[Any], dict[str, Any]]]) -> list[TaskHandle[R]]:
        """Enqueue many calls ``(args, kwargs)`` with these options in few round trips."""
        return self.task.app.enqueue_many(self.task.name, calls, **self.options)


class Task(Generic[P, R]):
    """A registered handler. Calling it runs the function directly; ``enqueue`` queues it."""

    def __init__(
        self,
        app: Producer,
        fn: Callable[..., Any],
        name: str,
        options: TaskOptions,
        fits: Callable[..., None] | None = None,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        #: takes the arguments ``fn`` takes and raises TypeError for others (None: nothing checked)
        self.fits = fits
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self.fn(*args, **kwargs)
        return result

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue one call of the handler (its arguments checked against it, then stored). Raises
        TypeError/ValueError for bad arguments or options, SerializationError, DuplicateTask, QueueFull."""
        handle: TaskHandle[R] = self.app.enqueue(self.name, args=list(args), kwargs=kwargs)
        return handle

    def enqueue_many(self, calls: Iterable[tuple[Iterable[Any], dict[str, Any]]]) -> list[TaskHandle[R]]:
        """Enqueue many calls ``(args, kwargs)`` in few round trips."""
        return self.app.enqueue_many(self.name, calls)

    def with_options(self, **options: Any) -> BoundTask[P, R]:
        """Per-enqueue options: queue, task_id, delay, eta, priority, max_retries, backoff, retry_on,
        timeout, expires, retention, unique_for, unique_key."""
        return BoundTask(self, options)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.options.queue!r}>"
