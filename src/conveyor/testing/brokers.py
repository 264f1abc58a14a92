"""``SpyBroker``: wrap any broker to see the calls made to it and to make chosen calls fail or wait.

A test that needs to know how the worker talks to its broker (how many claims, with which limit, from
which thread), or how it copes with a broker that fails or stalls, wraps a real broker instead of
assigning over its methods::

    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy)
    spy.fail("settle", BrokerUnavailable("down"), times=2)   # the next two settles raise
    spy.before("claim", lambda call: started.set())          # runs in the claiming thread
    with spy.paused():                                       # other threads' calls wait meanwhile
        clock.advance(60)
        spy.reap(clock.now())
    ...
    assert [call.arguments["limit"] for call in spy.calls_to("claim")] == [8, 2]

Every public method of the wrapped broker goes through the spy: the ``Broker`` protocol's methods are
declared here (so the spy type-checks as a ``Broker``), and the wrapped broker's other methods (its
optional capabilities, such as ``wait_for_work`` or ``claim_after_wait``) are wrapped per instance as it
is built. So ``isinstance(spy, WaitsForWork)`` holds exactly when it holds for the wrapped broker, and
the worker takes the same paths as with the broker alone. Its other attributes (``policy``, a client)
are properties reading and writing the wrapped broker's (on a subclass made for the wrapped broker's
attributes), so a capability declaring an attribute (``AppliesPolicy``) holds alike. The wrapped
broker's calls to itself do not go through the spy.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Generic, ParamSpec, TypeVar

from conveyor.brokers import open_broker
from conveyor.brokers.base import Broker, EventCallback
from conveyor.errors import ConfigurationError
from conveyor.model import (
    BrokerPolicy,
    LeaseStatus,
    NewTask,
    Outcome,
    QueueInfo,
    QueueSettings,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = ["Call", "SpyBroker"]

B = TypeVar("B", bound=Broker)
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Call:
    """One call made through a :class:`SpyBroker`, recorded as it starts.

    ``arguments``: every parameter by name, defaults included (``call.arguments["limit"]``).
    ``thread``: the name of the thread that made it. ``number``: its place among all recorded calls.
    """

    name: str
    arguments: dict[str, Any]
    thread: str
    number: int


@dataclass
class _Fault:
    times: int | None  # calls left to act on (None: every call)
    delay: float = 0.0
    hook: Callable[[Call], object] | None = None
    error: BaseException | Callable[[], BaseException] | None = None


class SpyBroker(Generic[B]):
    """A broker that records each call made through it and passes it on to ``wrapped``, unless a fault
    set with :meth:`fail`, :meth:`delay` or :meth:`before` acts on it first, or :meth:`paused` holds it
    back. Thread-safe."""

    def __init__(self, wrapped: B) -> None:
        if not isinstance(wrapped, Broker):
            raise TypeError(f"SpyBroker wraps a Broker, not {type(wrapped).__name__}")
        self.wrapped: B = wrapped
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._signatures: dict[str, inspect.Signature] = {}
        self._door = threading.Condition(self._lock)
        self._pause: tuple[int, frozenset[str] | None] | None = None  # (owner thread, methods held or all)
        own = {name for klass in type(self).__mro__ for name in vars(klass)}
        methods = _public_methods(wrapped)
        for name in methods:
            if name not in own:  # a capability: an instance attribute, so static isinstance checks see it
                setattr(self, name, self._wrap(getattr(wrapped, name)))
        data = tuple(sorted(_public_names(wrapped) - set(methods) - own))
        if data:  # its other attributes (``policy``, ...) as properties of a subclass, for the same reason
            self.__class__ = _reading_through(type(self), data)

    @classmethod
    def from_url(cls, url: str, policy: BrokerPolicy | None = None) -> SpyBroker[Broker]:
        """A spy around the broker ``url`` names (``open_broker``)."""
        return SpyBroker(open_broker(url, policy))

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet: __init__ failed or is still running
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"SpyBroker({self.wrapped!r})"

    # -- what was called -------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every call so far, in the order they started."""
        with self._lock:
            return list(self._calls)

    def calls_to(self, name: str) -> list[Call]:
        """The calls of method ``name`` so far, in the order they started."""
        self._check_name(name)
        return [call for call in self.calls if call.name == name]

    def count(self, name: str) -> int:
        """How many calls of method ``name`` started so far."""
        return len(self.calls_to(name))

    # -- faults ----------------------------------------------------------------------------------

    def fail(self, name: str, error: BaseException | Callable[[], BaseException], times: int | None = 1) -> None:
        """Make the next ``times`` calls of ``name`` (None: every one) raise ``error`` instead of reaching
        the wrapped broker. ``error``: an exception, or a class or function making one per call."""
        if not (isinstance(error, BaseException) or callable(error)):
            raise TypeError(f"error must be an exception or make one, not {type(error).__name__}")
        self._add(name, _Fault(_check_times(times), error=error))

    def delay(self, name: str, seconds: float, times: int | None = None) -> None:
        """Make the next ``times`` calls of ``name`` (None: every one) wait ``seconds`` before they go on."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"seconds must be a number, not {type(seconds).__name__}")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ConfigurationError(f"seconds must be finite and >= 0, not {seconds!r}")
        self._add(name, _Fault(_check_times(times), delay=float(seconds)))

    def before(self, name: str, hook: Callable[[Call], object], times: int | None = None) -> None:
        """Run ``hook(call)`` in the calling thread before the next ``times`` calls of ``name`` (None: every
        one) go on: to note what the caller's state was, or to hold the call (wait on an event) while the
        test does something else. An exception from the hook is raised to the caller."""
        if not callable(hook):
            raise TypeError(f"hook must be callable, not {type(hook).__name__}")
        self._add(name, _Fault(_check_times(times), hook=hook))

    @contextlib.contextmanager
    def paused(self, *names: str) -> Iterator[None]:
        """While inside, calls of ``names`` (none named: every method) from other threads wait to start;
        this thread's calls go through. Calls already under way go on. For a step other threads must not
        interleave with (advance the clock, then reap, before a worker's heartbeat extends the lease)."""
        for name in names:
            self._check_name(name)
        with self._door:
            if self._pause is not None:
                raise RuntimeError("this SpyBroker is paused already")
            self._pause = (threading.get_ident(), frozenset(names) or None)
        try:
            yield
        finally:
            with self._door:
                self._pause = None
                self._door.notify_all()

    def clear(self) -> None:
        """Forget every fault still set (recorded calls stay)."""
        with self._lock:
            self._faults.clear()

    def _add(self, name: str, fault: _Fault) -> None:
        self._check_name(name)
        with self._lock:
            self._faults.setdefault(name, []).append(fault)

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"a method name is a str, not {type(name).__name__}")
        if name.startswith("_") or not callable(getattr(self.wrapped, name, None)):
            raise ConfigurationError(f"{type(self.wrapped).__name__} has no public method {name!r}")

    # -- the way through ---------------------------------------------------------------------------

    def _through(self, method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        name = method.__name__
        signature = self._signatures.get(name)
        if signature is None:
            signature = self._signatures[name] = inspect.signature(method)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return method(*args, **kwargs)  # raises the wrapped method's own TypeError
        bound.apply_defaults()
        with self._door:
            while self._held(name):
                self._door.wait()
            call = Call(name, dict(bound.arguments), threading.current_thread().name, len(self._calls))
            self._calls.append(call)
            faults = self._faults.get(name, [])
            acting = [fault for fault in faults if fault.times is None or fault.times > 0]
            for fault in acting:
                if fault.times is not None:
                    fault.times -= 1
            self._faults[name] = [fault for fault in acting if fault.times is None or fault.times > 0]
        for fault in acting:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.hook is not None:
                fault.hook(call)
            if fault.error is not None:
                error = fault.error if isinstance(fault.error, BaseException) else fault.error()
                raise error.with_traceback(None)
        return method(*args, **kwargs)

    def _held(self, name: str) -> bool:
        if self._pause is None:
            return False
        owner, names = self._pause
        return owner != threading.get_ident() and (names is None or name in names)

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def through(*args: Any, **kwargs: Any) -> Any:
            return self._through(method, *args, **kwargs)

        return through

    # -- the Broker protocol, declared for the type checker (each call goes through _through) --------

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[str | None]:
        return self._through(self.wrapped.enqueue, tasks, now)

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        return self._through(self.wrapped.claim, queues, now, lease_for, limit)

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        return self._through(self.wrapped.settle, outcomes, now)

    def extend(self, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
        return self._through(self.wrapped.extend, task_id, token, now, lease_for)

    def promote(self, now: float, limit: int = 1000) -> int:
        return self._through(self.wrapped.promote, now, limit)

    def reap(self, now: float, limit: int = 1000) -> int:
        return self._through(self.wrapped.reap, now, limit)

    def clean(self, now: float, limit: int = 1000) -> int:
        return self._through(self.wrapped.clean, now, limit)

    def get(self, task_id: str, now: float) -> TaskRecord | None:
        return self._through(self.wrapped.get, task_id, now)

    def list_tasks(
        self, queue: str, state: TaskState, now: float, offset: int = 0, limit: int = 100
    ) -> list[TaskRecord]:
        return self._through(self.wrapped.list_tasks, queue, state, now, offset, limit)

    def queues(self, now: float) -> list[QueueInfo]:
        return self._through(self.wrapped.queues, now)

    def configure_queue(self, settings: QueueSettings) -> None:
        return self._through(self.wrapped.configure_queue, settings)

    def set_paused(self, queue: str, paused: bool) -> None:
        return self._through(self.wrapped.set_paused, queue, paused)

    def run_now(self, task_id: str, now: float) -> None:
        return self._through(self.wrapped.run_now, task_id, now)

    def archive(self, task_id: str, now: float) -> None:
        return self._through(self.wrapped.archive, task_id, now)

    def cancel(self, task_id: str, now: float) -> TaskState:
        return self._through(self.wrapped.cancel, task_id, now)

    def delete(self, task_id: str, now: float) -> None:
        return self._through(self.wrapped.delete, task_id, now)

    def purge(self, queue: str, state: TaskState, now: float, limit: int | None = None) -> int:
        return self._through(self.wrapped.purge, queue, state, now, limit)

    def register_worker(self, info: WorkerInfo, now: float, ttl: float) -> None:
        return self._through(self.wrapped.register_worker, info, now, ttl)

    def unregister_worker(self, worker_id: str) -> None:
        return self._through(self.wrapped.unregister_worker, worker_id)

    def workers(self, now: float) -> list[WorkerInfo]:
        return self._through(self.wrapped.workers, now)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        return self._through(self.wrapped.subscribe, callback)

    def close(self) -> None:
        return self._through(self.wrapped.close)


def _public_methods(obj: object) -> list[str]:
    """The public methods of ``obj``'s class (looked up statically: no property is run)."""
    names: set[str] = set()
    for klass in type(obj).__mro__:
        if klass is object:
            continue
        names.update(
            name
            for name, value in vars(klass).items()
            if not name.startswith("_") and isinstance(value, FunctionType | classmethod | staticmethod)
        )
    return sorted(names)


def _public_names(obj: object) -> set[str]:
    """Every public attribute name of ``obj``: its own and its class's."""
    names = {name for name in vars(obj) if not name.startswith("_")}
    for klass in type(obj).__mro__:
        if klass is not object:
            names.update(name for name in vars(klass) if not name.startswith("_"))
    return names


_SUBCLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def _reading_through(cls: type[SpyBroker[Any]], names: tuple[str, ...]) -> type[SpyBroker[Any]]:
    """A subclass of ``cls`` whose properties ``names`` read (and write) the wrapped broker's (one per
    class and names: a race makes two, which is harmless)."""
    made = _SUBCLASSES.get((cls, names))
    if made is not None:
        return made

    def through(name: str) -> property:
        def read(spy: SpyBroker[Any]) -> Any:
            return getattr(spy.wrapped, name)

        def write(spy: SpyBroker[Any], value: Any) -> None:
            setattr(spy.wrapped, name, value)

        return property(read, write, doc=f"The wrapped broker's ``{name}``.")

    made = type(cls.__name__, (cls,), {name: through(name) for name in names} | {"__module__": cls.__module__})
    _SUBCLASSES[(cls, names)] = made
    return made


def _check_times(times: int | None) -> int | None:
    if times is None:
        return None
    if isinstance(times, bool) or not isinstance(times, int):
        raise TypeError(f"times must be an int or None, not {type(times).__name__}")
    if times < 1:
        raise ConfigurationError(f"times must be >= 1 (None: every call), not {times}")
    return times
