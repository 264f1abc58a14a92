"""``Conveyor``: the task registry bound to one broker, and the producer API."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Coroutine, Iterable
from functools import cached_property
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from conveyor._validate import (
    MOST_COUNT,
    check_after,
    check_aging,
    check_expires,
    check_int,
    check_queue,
    check_seconds,
    check_task_name,
    check_when,
)
from conveyor.brokers import default_url, open_broker
from conveyor.brokers.base import AppliesPolicy, Broker, LabelsIds, SharesClock
from conveyor.clock import Clock, check_clock
from conveyor.context import TaskContext, wants_context
from conveyor.declared import DeclaredTasks
from conveyor.errors import ConfigurationError, DuplicateTask, QueueFull, ReplicationTimeout, TaskNotFound
from conveyor.ids import check_place, new_task_id
from conveyor.info import task_info
from conveyor.inspect import Inspector
from conveyor.lease import Lease
from conveyor.model import MAX_PARTITIONS, BrokerPolicy, NewTask, QueueSettings, TaskDeclaration, TaskInfo, TaskRecord
from conveyor.options import TaskOptions, check_enqueue_options, encode_travelling, malformed_call, registered_options
from conveyor.serializers import encode, encode_payload
from conveyor.signatures import arguments_check
from conveyor.task import Task, TaskHandle
from conveyor.worker import Worker, WorkerConfig

__all__ = ["Conveyor"]

log = logging.getLogger("conveyor")

P = ParamSpec("P")
R = TypeVar("R")

#: unique_key without unique_for: held while the task is unfinished (ten years is "unbounded").
_UNBOUNDED = 10 * 365 * 24 * 3600.0
#: The options of a task name this process did not register (TaskOptions is frozen: one is enough).
_DEFAULT_OPTIONS = TaskOptions()


class Conveyor:
    """A task registry bound to a broker.

    ``url``: ``memory://``, ``sqlite:///path.db`` or ``redis://...`` (default: ``CONVEYOR_URL``, else
    ``sqlite:///conveyor.db``). ``clock``: a zero-argument callable returning epoch seconds (tests pass a
    ``FakeClock``). ``broker``: an already-open broker instead of a URL. ``policy``: the broker's own
    rules (max stalls, archive retention and cap). ``rng``: the RNG for backoff jitter (seed it in tests).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        broker: Broker | None = None,
        policy: BrokerPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if broker is not None and url is not None:
            raise ConfigurationError("give a broker URL or a broker, not both")
        if policy is not None and not isinstance(policy, BrokerPolicy):
            raise TypeError(f"policy must be a BrokerPolicy, not {type(policy).__name__}")
        # Every argument is checked before the broker opens, so a bad one leaves no connection behind.
        if clock is not None:
            check_clock(clock)
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, not {type(rng).__name__}")
        self.broker: Broker = broker if broker is not None else open_broker(url, policy)
        #: The URL the broker was opened from (None for a broker given as an object).
        self.url: str | None = None if broker is not None else (url or default_url())
        self._clock_given = clock is not None
        self.clock: Clock = check_clock(clock if clock is not None else _broker_clock(self.broker))
        self.rng = rng or random.Random()
        self.registry: dict[str, Task[Any, Any]] = {}
        self._wants_ctx: dict[str, bool] = {}
        self._enqueue_hooks: tuple[Callable[[list[NewTask]], None], ...] = ()
        #: the suffix a generated id of a queue carries (None: none, the usual case; ``LabelsIds``)
        self._id_suffix = _id_suffixes(self.broker)

    def now(self) -> float:
        """The current time by this app's clock."""
        return float(self.clock())

    # -- registry ------------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[Concatenate[TaskContext, P], Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[Concatenate[TaskContext, P], R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, **options: Any) -> _TaskDecorator: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a handler: ``@app.task`` or ``@app.task(name=..., queue=..., max_retries=...)``.

        Options: name (default: the function's ``__name__``), queue, max_retries, backoff, retry_on,
        timeout, priority, retention, expires, unique_for (every enqueue unique by name and arguments
        for that many seconds, as ``enqueue(..., unique_for=...)``; ``unique_for=None`` at an enqueue
        lifts it). A handler whose first parameter is annotated ``TaskContext`` receives the running
        task's context there.
        """
        name = options.pop("name", None)
        task_options = registered_options(options)

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(func):
                raise TypeError(f"a task handler must be callable, not {func!r}")
            task_name = check_task_name(name if name is not None else getattr(func, "__name__", ""))
            if task_name in self.registry:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            takes_context = wants_context(func)
            task: Task[Any, Any] = Task(
                self, func, task_name, task_options, arguments_check(func, takes_context, task_name)
            )
            self.registry[task_name] = task
            self._wants_ctx[task_name] = takes_context
            return task

        if fn is not None:
            return register(fn)
        return _TaskDecorator(register)

    def handler(self, name: str) -> Task[Any, Any] | None:
        """The registered task of that name, or None."""
        return self.registry.get(name)

    def wants_context(self, name: str) -> bool:
        """Whether the handler registered as ``name`` takes a ``TaskContext`` first (False if none is)."""
        return self._wants_ctx.get(name, False)

    @cached_property
    def declared(self) -> DeclaredTasks:
        """The task declarations workers published in this app's broker (``conveyor.declared``)."""
        return DeclaredTasks(self.broker)

    def declaration(self, name: str) -> TaskDeclaration | None:
        """How a worker declared task ``name`` (its queue, priority, ...), or None if none ever did."""
        return self.declared.get(check_task_name(name))

    # -- producing -----------------------------------------------------------------------------

    def enqueue(
        self, name: str, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
    ) -> TaskHandle[Any]:
        """Enqueue a task by name (the producer need not have the handler). Raises DuplicateTask,
        QueueFull, SerializationError, TypeError/ValueError for bad options."""
        now = self.now()
        new = self._build(name, args, kwargs or {}, check_enqueue_options(options), now)
        stored = [new]
        existing = self.broker.enqueue(stored, now)[0]
        if existing is not None:
            raise DuplicateTask(existing)
        for hook in self._enqueue_hooks:  # usually none
            _tell(hook, stored)
        return TaskHandle(self, new.id)

    def enqueue_many(
        self, name: str, calls: Iterable[tuple[Iterable[Any], dict[str, Any]]], **options: Any
    ) -> list[TaskHandle[Any]]:
        """Enqueue many calls ``(args, kwargs)`` of one task in few round trips.

        Every call is checked before anything is written. A duplicate does not raise: its handle
        points at the existing task. ``QueueFull`` (or ``ReplicationTimeout``) on Redis may come after
        earlier parts of a long call were stored (500 tasks per queue a call): its ``stored`` holds
        their ids and ``stored_calls`` their places in ``calls`` (enqueue the others again), and
        ``on_enqueue`` callbacks are told of them.
        """
        now = self.now()
        checked = check_enqueue_options(options)
        if "task_id" in checked:
            raise ValueError("task_id cannot be shared by several calls; enqueue them one by one")
        calls = calls if isinstance(calls, list) else list(calls)
        suffix = _batch_suffixes(self.broker, len(calls)) if self._id_suffix is not None else None
        try:
            tasks = [self._build(name, args, kwargs, checked, now, suffix) for args, kwargs in calls]
        except (TypeError, ValueError) as exc:
            raise (malformed_call(calls) or exc) from None
        try:
            results = self.broker.enqueue(tasks, now) if tasks else []
        except (QueueFull, ReplicationTimeout) as refused:  # on Redis, a long call's earlier parts stay stored
            if refused.stored:  # in the calls' order, with their places: what to enqueue again is the rest
                stored = set(refused.stored)
                places = [place for place, task in enumerate(tasks) if task.id in stored]
                refused.stored = tuple(tasks[place].id for place in places)
                refused.stored_calls = tuple(places)
                for hook in self._enqueue_hooks:
                    _tell(hook, [tasks[place] for place in places])
            raise
        for hook in self._enqueue_hooks:  # usually none
            _tell(hook, [task for task, existing in zip(tasks, results, strict=True) if existing is None])
        return [TaskHandle(self, existing or task.id) for task, existing in zip(tasks, results, strict=True)]

    def on_enqueue(self, callback: Callable[[list[NewTask]], None]) -> Callable[[], None]:
        """Call ``callback(tasks)`` after each enqueue by this app, in the enqueuing thread, with the
        tasks it stored (duplicates left out); returns a function that unsubscribes. The tasks are
        already stored when it runs, so a raising callback is logged and never fails the enqueue.
        ``Metrics(app)`` counts enqueues this way."""
        if not callable(callback):
            raise TypeError("callback must be callable")
        self._enqueue_hooks = (*self._enqueue_hooks, callback)

        def unsubscribe() -> None:
            self._enqueue_hooks = tuple(hook for hook in self._enqueue_hooks if hook is not callback)

        return unsubscribe

    def _build(
        self,
        name: str,
        args: Iterable[Any],
        kwargs: dict[str, Any],
        options: dict[str, Any],
        now: float,
        suffix: Callable[[str], str] | None = None,
    ) -> NewTask:
        registered = self.registry.get(name) if isinstance(name, str) else None
        if registered is None:  # (a registered name was checked when it was registered)
            check_task_name(name)
        if isinstance(args, (str, bytes, dict)) or not hasattr(args, "__iter__"):
            raise TypeError(f"args must be a list or tuple of positional arguments, not {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
        arguments = args if type(args) is list else list(args)
        if registered is not None and registered.fits is not None:
            try:
                registered.fits(*arguments, **kwargs)
            except TypeError as exc:
                raise TypeError(f"task {name!r} cannot take these arguments: {exc}") from None
        payload = encode_payload(arguments, kwargs)
        # A name without a handler here gets its worker's declared queue, priority, expiry and uniqueness.
        base = registered.options if registered is not None else self._declared_options(name)
        if not options and base.unique_for is None:  # the usual call: the base options as they are (checked)
            expires_at = None if base.expires is None else check_expires(base.expires, now)
            # id, name, queue, payload, priority, run_at, expires_at, unique_key, unique_until, options, fresh
            return NewTask(
                self._new_id(base.queue, suffix), name, base.queue, payload, base.priority, None, expires_at,
                None, None, "{}", True,
            )  # fmt: skip
        queue = check_queue(options.get("queue") or base.queue)
        priority = options.get("priority", base.priority)
        run_at: float | None = None
        if options.get("delay") is not None:
            run_at = check_after("delay", float(options["delay"]), now)
        elif options.get("eta") is not None:
            run_at = check_when("eta", options["eta"], now)
        expires = options.get("expires", base.expires)
        expires_at = None
        if expires is not None:
            expires_at = check_expires(expires, now)
        unique_key, unique_until = None, None
        window = options.get("unique_for", base.unique_for)  # None given: not unique
        if window is not None or options.get("unique_key") is not None:
            unique_key = options.get("unique_key") or _call_key(name, payload)
            unique_until = now + (float(window) if window is not None else _UNBOUNDED)
        # positional, in NewTask's field order (cheaper than keywords on every enqueue; docs/performance-notes.md):
        # id, name, queue, payload, priority, run_at, expires_at, unique_key, unique_until, options, fresh
        task_id = options.get("task_id")
        if task_id and "~" in task_id:
            check_place(task_id, queue)
        return NewTask(
            task_id or self._new_id(queue, suffix),
            name,
            queue,
            payload,
            priority,
            run_at,
            expires_at,
            unique_key,
            unique_until,
            encode(travelling, "task options") if (travelling := encode_travelling(options)) else "{}",
            not task_id,
        )

    def _new_id(self, queue: str, suffix: Callable[[str], str] | None = None) -> str:
        """A generated id (time-ordered: conveyor/ids.py says why), with the suffix the broker routes
        ids of ``queue`` by, if it does (``LabelsIds``; ``suffix``: a batch's)."""
        suffix = suffix or self._id_suffix
        return new_task_id() if suffix is None else new_task_id() + suffix(queue)

    def _declared_options(self, name: str) -> TaskOptions:
        declaration = self.declared.get(name)
        if declaration is None:
            return _DEFAULT_OPTIONS
        return TaskOptions(
            queue=declaration.queue,
            priority=declaration.priority,
            expires=declaration.expires,
            unique_for=declaration.unique_for,
        )

    # -- reading -------------------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo:
        """The task as stored now. Raises TaskNotFound (unknown, deleted or past its retention)."""
        if not isinstance(task_id, str):
            raise TypeError(f"task id must be a str, not {type(task_id).__name__}")
        record = self.broker.get(task_id, self.now())
        if record is None:
            raise TaskNotFound(task_id)
        return self.to_info(record)

    def to_info(self, record: TaskRecord) -> TaskInfo:
        """Decode a stored record for users (arguments, result, resolved retry budget)."""
        registered = self.registry.get(record.name)
        return task_info(record, registered.options if registered else None, self.declared.get)

    def stats(self) -> dict[str, dict[str, int]]:
        """Task counts per queue and state: ``{"default": {"scheduled": 0, ..., "total": 1}}``."""
        return {info.name: dict(info.counts) for info in self.broker.queues(self.now())}

    def configure_queue(
        self,
        name: str,
        max_size: int | None = None,
        concurrency: int | None = None,
        aging: float | None = None,
        partitions: int = 1,
    ) -> None:
        """Store a queue's limits in the broker (every process sees them). None: unbounded / no aging.
        ``partitions``: parts the queue is spread over (1 to ``MAX_PARTITIONS``), where the broker
        splits queues over slots (docs/architecture.md, "Partitions")."""
        check_queue(name)
        _check_partitions(partitions)
        check_int("max_size", max_size, minimum=0, maximum=MOST_COUNT, allow_none=True)
        check_int("concurrency", concurrency, minimum=1, maximum=MOST_COUNT, allow_none=True)
        if aging is not None:
            check_aging(aging)
        self.broker.configure_queue(
            QueueSettings(name, max_size, concurrency, None if aging is None else float(aging), partitions=partitions)
        )

    @cached_property
    def inspect(self) -> Inspector:
        """The admin API (list, run_now, archive, delete, cancel, pause, resume, purge, ...)."""
        return Inspector(self)

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, queues: Iterable[str] = ("default",), lease_for: float = 30.0) -> Lease | None:
        """Lease one ready task for an external consumer; None if nothing is ready."""
        names = _check_queues(queues)
        seconds = check_seconds("lease_for", lease_for)
        if not seconds:
            raise ValueError("lease_for must be > 0")
        records = self.broker.claim(names, self.now(), seconds, 1)
        return Lease(self, records[0]) if records else None

    def worker(self, queues: Iterable[str] = ("default",), **settings: Any) -> Worker:
        """A worker serving ``queues`` (in order). See ``WorkerConfig`` for the settings."""
        return Worker(self, WorkerConfig(queues=tuple(_check_queues(queues)), **settings))

    def on_state_change(self, callback: Callable[[str, str | None, str], None]) -> Callable[[], None]:
        """Call ``callback(task_id, old_state, new_state)`` on every transition; returns unsubscribe."""
        if not callable(callback):
            raise TypeError("callback must be callable")
        return self.broker.subscribe(lambda event: callback(event.task_id, event.old_state, event.new_state))

    def rebind(self, url: str) -> None:
        """Move this app to the broker ``url`` names, closing the one it had (``conveyor --url URL worker
        APP``: the URL given to the command wins over the app's own). Call it before the app is used."""
        broker = open_broker(url, self.broker.policy if isinstance(self.broker, AppliesPolicy) else None)
        self.broker.close()
        self.broker, self.url = broker, url
        if not self._clock_given:
            self.clock = check_clock(_broker_clock(broker))
        self._id_suffix = _id_suffixes(broker)
        for name in ("inspect", "declared"):  # cached views of the old broker
            self.__dict__.pop(name, None)

    def close(self) -> None:
        """Close the broker's connections (``with Conveyor(...) as app:`` does it on leaving). Idempotent."""
        self.broker.close()

    def __enter__(self) -> Conveyor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TaskDecorator:
    """What ``@app.task(...)`` returns: applied to the handler, it registers it."""

    def __init__(self, register: Callable[[Callable[..., Any]], Task[Any, Any]]) -> None:
        self._register = register

    @overload
    def __call__(self, fn: Callable[Concatenate[TaskContext, P], Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[TaskContext, P], R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Task[Any, Any]:
        return self._register(fn)


def _check_queues(queues: Iterable[str]) -> list[str]:
    if isinstance(queues, str):
        queues = [queues]
    names = [check_queue(q) for q in queues]
    if not names:
        raise ValueError("give at least one queue")
    return names


def _check_partitions(value: object) -> int:
    """A queue's partitions: an int from 1 to ``MAX_PARTITIONS`` (else ``ConfigurationError``, a
    ValueError; TypeError if not an int), refused before anything reaches a broker."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"partitions must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_PARTITIONS:
        raise ConfigurationError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {value!r}")
    return value


def _id_suffixes(broker: Broker) -> Callable[[str], str] | None:
    """The suffix of a generated id by queue, for a broker that routes ids by it (``LabelsIds``)."""
    return broker.id_suffixes() if isinstance(broker, LabelsIds) else None


def _batch_suffixes(broker: Broker, count: int) -> Callable[[str], str] | None:
    """The suffixes of a batch's ``count`` generated ids, for a broker that routes ids by them."""
    return broker.batch_id_suffixes(count) if isinstance(broker, LabelsIds) else None


def _broker_clock(broker: Broker) -> Clock | None:
    """The broker's own clock if it has one (Redis: the server's time, shared by every process), else None."""
    return broker.server_clock() if isinstance(broker, SharesClock) else None


def _tell(hook: Callable[[list[NewTask]], None], tasks: list[NewTask]) -> None:
    try:
        hook(tasks)
    except Exception:
        log.exception("enqueue callback %r raised; ignored", hook)


def _call_key(name: str, payload: str) -> str:
    canonical = json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":"))
    return "call:" + hashlib.sha256(f"{name}\x00{canonical}".encode()).hexdigest()
