"""``WorkerConfig``: every worker setting, with its default, in one frozen dataclass.

Recovery arithmetic with the defaults (``lease_for`` 10 s, heartbeat every 2 s, reaper every 2 s,
idle poll 0.5 s): a worker that dies had last pushed its lease to at most ``death + 10 s``; the next
reaper pass of any live worker (at most 2 s later) makes the task pending again, and an idle worker
claims it within one poll (0.5 s). Worst case ≈ 10 + 2 + 0.5 = 12.5 s, under the 15 s we promise.

``max_stalls`` (a task whose lease expired that many times is archived ``poison``) is a rule of the
broker, not of a worker: pass ``BrokerPolicy(max_stalls=...)`` to ``Conveyor(..., policy=...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from conveyor._validate import check_positive, check_queue, check_seconds
from conveyor.errors import ConfigurationError
from conveyor.names import similar_name

if TYPE_CHECKING:
    from conveyor.worker.middleware import Middleware

__all__ = ["DEFAULT_QUEUES", "WorkerConfig", "parse_queues", "unknown_env"]

#: What a worker serves unless told otherwise (``-Q``, ``CONVEYOR_WORKER_QUEUES``, ``queues=``).
DEFAULT_QUEUES = ("default",)

_ENV_PREFIX = "CONVEYOR_WORKER_"


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one worker (defaults in parentheses).

    queues (``("default",)``): the queues served. weights (None): one positive int per queue; a
        fetch then visits the queues in a weighted random order (``emails=3,default=1`` visits
        ``emails`` first three times out of four). Without weights, or with ``strict=True``, the
        queues are visited in the order given (the first is drained first).
    concurrency (10): tasks run at once per process (sync ones in threads, async ones on one loop).
    processes (0): 0 runs the worker in this process; N >= 1 runs a supervisor with N child processes
        that replaces crashed ones and enforces hard timeouts by killing the child (see reliability.md).
    prefetch (None): tasks claimed beyond the free slots (they hold leases while they wait; released
        at once on shutdown). None: as many as its slots finish in 10 ms at the time its tasks took
        lately, at most 100 (``worker/prefetch.py``): large batches of short tasks, none of slow
        ones. N: always N; 0 claims only for free slots.
    claimers (None): claims that may be in flight at once, each on its own thread (see fetcher.py).
        None: 2 on a broker that ``ClaimsAfterWait`` (Redis: while one claim's reply is handed to the
        pool, the next runs on the server), else 1 (memory, SQLite: claims there take a lock anyway).
    lease_for (10 s): how long a claim holds a task before another worker may take it; renewed by the
        heartbeat every ``heartbeat_interval`` (None: ``lease_for / 5``) while the task is held.
    reaper_interval (2 s), promoter_interval (1 s), janitor_interval (60 s): how often this worker
        reclaims expired leases, moves due scheduled/retry tasks to pending, and deletes expired ones.
    poll_interval (0.5 s): how long an idle fetcher waits before claiming again.
    shutdown_grace (20 s): after the first SIGTERM/SIGINT, how long running tasks may finish before
        their leases are released back to pending.
    registry_interval (5 s): how often the worker advertises itself (``Broker.register_worker``,
        visible for 3 intervals).
    summary_interval (10 s): how often the worker logs one INFO line of what it did (tasks done,
        failed, retried, their rate, slots busy), when it did something; None or 0: never. A task's
        start and success are DEBUG lines; its retries, failures, lease loss and timeout are INFO or
        WARNING lines of their own.
    middleware (()): hooks called around every task (see ``conveyor.Middleware``).
    middleware_refs (()): import references (``pkg.module:obj``) of middleware given on the command
        line; they are loaded into ``middleware`` and passed on to ``--processes`` children, which
        load them too (middleware objects given in code cannot cross a process boundary).
    freeze_heap (True): when the worker starts, collect garbage once, then move every object alive
        (modules, the app, its handlers) to the garbage collector's permanent generation until it
        stops (``gc.freeze()``). Tasks' short-lived objects still trigger collections; a full one
        then traverses only what was made since, not the whole application's heap (the larger the
        app, the larger the saving; docs/performance-notes.md).
        Objects alive at start that later become cyclic garbage are collected only after the
        worker stops: set False for an app that drops large cyclic structures it built before.
    unregistered_delay / unregistered_window: a task whose name (or whose backoff's registered kind)
        this worker does not know is put back ``unregistered_delay`` seconds later (30 s), until
        ``unregistered_window`` seconds (1 h) after it was first due; then it is archived
        ``unregistered``. Rolling deploys lose nothing.
    """

    queues: tuple[str, ...] = DEFAULT_QUEUES
    weights: tuple[int, ...] | None = None
    strict: bool = False
    concurrency: int = 10
    processes: int = 0
    prefetch: int | None = None
    claimers: int | None = None
    lease_for: float = 10.0
    heartbeat_interval: float | None = None
    reaper_interval: float = 2.0
    promoter_interval: float = 1.0
    janitor_interval: float = 60.0
    poll_interval: float = 0.5
    shutdown_grace: float = 20.0
    registry_interval: float = 5.0
    summary_interval: float | None = 10.0
    middleware: tuple[Middleware, ...] = ()
    middleware_refs: tuple[str, ...] = ()
    unregistered_delay: float = 30.0
    unregistered_window: float = 3600.0
    freeze_heap: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.queues, list):
            object.__setattr__(self, "queues", tuple(self.queues))
        if isinstance(self.weights, list):
            object.__setattr__(self, "weights", tuple(self.weights))
        if isinstance(self.middleware, list):
            object.__setattr__(self, "middleware", tuple(self.middleware))
        if isinstance(self.middleware_refs, list):
            object.__setattr__(self, "middleware_refs", tuple(self.middleware_refs))
        if not isinstance(self.queues, tuple) or not self.queues:
            raise ValueError("queues must be a non-empty tuple of queue names")
        for queue in self.queues:
            check_queue(queue)
        if len(set(self.queues)) != len(self.queues):
            raise ValueError(f"queues must be distinct, got {self.queues!r}")
        if self.weights is not None:
            if len(self.weights) != len(self.queues):
                raise ValueError("weights must give one weight per queue")
            for weight in self.weights:
                _check_int("queue weight", weight, 1)
        _check_int("concurrency", self.concurrency, 1)
        _check_int("processes", self.processes, 0)
        if self.prefetch is not None:
            _check_int("prefetch", self.prefetch, 0)
        if self.claimers is not None:
            _check_int("claimers", self.claimers, 1)
        check_positive("lease_for", self.lease_for)
        check_positive("heartbeat_interval", self.heartbeat_interval, allow_none=True)
        for name in ("reaper_interval", "promoter_interval", "janitor_interval", "poll_interval"):
            check_positive(name, getattr(self, name))
        check_positive("registry_interval", self.registry_interval)
        check_seconds("summary_interval", self.summary_interval, allow_none=True)
        check_seconds("shutdown_grace", self.shutdown_grace)
        check_seconds("unregistered_delay", self.unregistered_delay)
        check_seconds("unregistered_window", self.unregistered_window)
        for flag in ("strict", "freeze_heap"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, not {type(getattr(self, flag)).__name__}")
        if self.heartbeat_every >= self.lease_for:
            raise ValueError("heartbeat_interval must be shorter than lease_for")

    @property
    def heartbeat_every(self) -> float:
        """Seconds between lease renewals: ``heartbeat_interval``, else ``lease_for / 5``."""
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease_for / 5

    @property
    def weighted(self) -> bool:
        """Whether fetches visit the queues in a weighted random order."""
        return self.weights is not None and not self.strict and len(self.queues) > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorkerConfig:
        """Settings from ``CONVEYOR_WORKER_<FIELD>`` variables (e.g. ``CONVEYOR_WORKER_CONCURRENCY=20``,
        ``CONVEYOR_WORKER_QUEUES=emails=3,default=1``, ``CONVEYOR_WORKER_STRICT=1``), or named as the
        ``conveyor worker`` option is (``CONVEYOR_WORKER_GRACE``, ``CONVEYOR_WORKER_LEASE``); ``overrides``
        win. A value that does not parse raises ``ConfigurationError`` naming its variable;
        :func:`unknown_env` names the variables no setting reads."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        given: dict[str, str] = {}  # field -> the variable that set it
        for variable, name in _env_names().items():
            raw = env.get(variable)
            if raw is None:
                continue
            other = given.setdefault(name, variable)
            if other != variable and env[other] != raw:
                raise ConfigurationError(f"{other}={env[other]!r} and {variable}={raw!r} set the same setting")
            kind = types[name]
            try:
                if name == "queues":
                    values["queues"], values["weights"] = parse_queues(raw)
                elif kind == "bool":
                    values[name] = _parse_bool(raw)
                elif str(kind).startswith("int"):
                    values[name] = int(raw)
                else:
                    values[name] = float(raw)
            except ValueError as exc:
                raise ConfigurationError(f"{variable}={raw!r}: {exc}") from None
        values.update(overrides)
        try:
            return cls(**values)
        except ValueError as exc:  # out of range: name the variable whose setting the message names
            named = [
                variable
                for name, variable in given.items()
                if name not in overrides and (name in str(exc) or (name == "queues" and "queue" in str(exc)))
            ]
            if len(named) != 1:
                raise
            raise ConfigurationError(f"{named[0]}={env[named[0]]!r}: {exc}") from None


#: Variables named as the ``conveyor worker`` option is, where that differs from the field's name.
_ENV_ALIASES = {"GRACE": "shutdown_grace", "LEASE": "lease_for"}
#: Fields no variable sets: objects, and weights (given with the queues: ``emails=3,default=1``).
_NOT_FROM_ENV = ("middleware", "middleware_refs", "weights")
#: ``CONVEYOR_WORKER_*`` variables read elsewhere (the loader's broker URL).
_READ_ELSEWHERE = ("URL",)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _env_names() -> dict[str, str]:
    """Each variable a setting reads → the ``WorkerConfig`` field it sets."""
    names = {_ENV_PREFIX + f.name.upper(): f.name for f in fields(WorkerConfig) if f.name not in _NOT_FROM_ENV}
    names.update({_ENV_PREFIX + alias: name for alias, name in _ENV_ALIASES.items()})
    return names


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"not a yes/no value (one of {', '.join(v for v in _TRUE + _FALSE if v)})")
    return value in _TRUE


def parse_queues(spec: str) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    """``"emails=3,default=1"`` → ``(("emails", "default"), (3, 1))``; ``"a,b"`` → ``(("a", "b"), None)``."""
    names: list[str] = []
    weights: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, weight = part.partition("=")
        names.append(check_queue(name.strip()))
        if sep and not (weight.strip().isascii() and weight.strip().isdigit()):
            raise ValueError(f"the weight of queue {name.strip()!r} must be a whole number, got {weight!r}")
        weights.append(int(weight) if sep else 1)
    if not names:
        raise ValueError(f"no queue named in {spec!r}")
    has_weights = any("=" in part for part in spec.split(","))
    return tuple(names), tuple(weights) if has_weights else None


def _check_int(what: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")


def unknown_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """One message per ``CONVEYOR_WORKER_*`` variable that no setting reads (a misspelt name would be
    ignored silently otherwise), naming the likely one."""
    env = os.environ if environ is None else environ
    known = [name.removeprefix(_ENV_PREFIX) for name in _env_names()] + list(_READ_ELSEWHERE)
    messages = []
    for variable in sorted(env):
        setting = variable.removeprefix(_ENV_PREFIX)
        if variable.startswith(_ENV_PREFIX) and setting not in known:
            likely = similar_name(setting, known)  # by the part after the prefix, which every name shares
            hint = "" if likely is None else f" (did you mean {_ENV_PREFIX + likely!r}?)"
            messages.append(f"{variable} is ignored: no worker setting reads it{hint}")
    return messages
