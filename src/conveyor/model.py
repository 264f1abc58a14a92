"""Value types shared by every layer: task states, the records brokers store, queue settings, events.

Brokers speak only in these plain frozen dataclasses (strings, numbers, tuples): no client types leak
through the :class:`~conveyor.brokers.base.Broker` protocol. Payloads and results travel as JSON text;
the app layer decodes them into :class:`TaskInfo` for users. The records built on hot paths (one per
claimed task, outcome, enqueued task, event) get :func:`~conveyor._frozen.fast_init`: still frozen, built
at a mutable dataclass's speed.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field
from typing import Any

from conveyor._frozen import fast_init

__all__ = [
    "UNFINISHED",
    "ArchiveReason",
    "BrokerPolicy",
    "ErrorEntry",
    "Event",
    "LeaseStatus",
    "NewTask",
    "Outcome",
    "QueueInfo",
    "QueueSettings",
    "TaskDeclaration",
    "TaskInfo",
    "TaskRecord",
    "TaskState",
    "WorkerInfo",
]


class TaskState(enum.StrEnum):
    """Where a task is in its life: scheduled → pending → active → completed, or retry / archived."""

    SCHEDULED = "scheduled"
    PENDING = "pending"
    ACTIVE = "active"
    RETRY = "retry"
    COMPLETED = "completed"
    ARCHIVED = "archived"


UNFINISHED = frozenset({TaskState.SCHEDULED, TaskState.PENDING, TaskState.ACTIVE, TaskState.RETRY})


class ArchiveReason(enum.StrEnum):
    """Why a task ended in the dead-letter state ``archived``."""

    FAILED = "failed"  # retries exhausted
    PERMANENT = "permanent"  # non-retryable error (PermanentError, or outside retry_on)
    EXPIRED = "expired"  # not started before its ``expires`` deadline
    CANCELLED = "cancelled"  # cancelled by an operator
    MANUAL = "manual"  # archived by an operator
    UNREGISTERED = "unregistered"  # no worker knew its name within the unregistered window
    POISON = "poison"  # undecodable payload, or its lease expired max_stalls times


@fast_init
@dataclass(frozen=True, slots=True)
class ErrorEntry:
    """One failure in a task's history."""

    attempt: int
    at: float
    error: str

    @staticmethod
    def undecodable(stored: str, reason: object) -> ErrorEntry:
        """What a broker reports for stored failure history it cannot read (attempt 0, at 0): the task
        is still listed and shown, with this entry saying why its history is missing."""
        return ErrorEntry(0, 0.0, f"undecodable error history: {reason} (stored: {stored[:80]!r})")


@fast_init
@dataclass(frozen=True, slots=True)
class NewTask:
    """A task as the app hands it to ``Broker.enqueue``.

    ``run_at`` None (or <= now) makes the task pending at once, later makes it scheduled.
    ``options`` is JSON text of the options given explicitly at enqueue (they travel with the task).
    ``unique_key``/``unique_until``: while a task holding that key is unfinished and ``now <
    unique_until``, another enqueue with the same key is a duplicate.
    ``fresh``: the app generated ``id`` (``conveyor.ids.new_task_id``), so no task holds it and a broker
    may store the task without looking for a duplicate; a caller that sets it promises a new id.
    """

    id: str
    name: str
    queue: str
    payload: str
    priority: int = 0
    run_at: float | None = None
    expires_at: float | None = None
    unique_key: str | None = None
    unique_until: float | None = None
    options: str = "{}"
    fresh: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task as a broker stores it (payload and result still JSON text)."""

    id: str
    name: str
    queue: str
    state: TaskState
    payload: str
    options: str
    priority: int
    enqueued_at: float
    first_due_at: float  # when the task was first due: max(enqueued_at, run_at)
    next_run_at: float | None  # set while scheduled / retry
    attempts: int = 0  # executions started (claims); release() gives one back
    retries: int = 0  # retries used
    stalls: int = 0  # leases that expired
    expires_at: float | None = None
    unique_key: str | None = None
    started_at: float | None = None  # start of the latest execution
    finished_at: float | None = None  # when it became completed/archived
    keep_until: float | None = None  # completed/archived: invisible and deletable from then on
    last_error: str | None = None
    archive_reason: ArchiveReason | None = None
    result: str | None = None  # JSON text
    errors: tuple[ErrorEntry, ...] = ()
    lease_token: str | None = None  # set while active
    lease_expires_at: float | None = None
    cancel_requested: bool = False  # set only by older versions: a cancel now archives a running task
    # the retry limit its latest failed execution ran with (``Outcome.max_retries``); None until one failed
    max_retries: int | None = None
    # the bounded traceback of its latest failed execution (``Outcome.traceback``); None if it had none
    traceback: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended, as handed to ``Broker.settle`` (fenced by ``token``).

    kind ``complete``: ``result`` (JSON text) kept ``keep_for`` seconds.
    kind ``retry``: back to state retry at ``run_at`` (retries + 1), ``error`` recorded.
    kind ``archive``: dead-lettered with ``reason``; ``error`` recorded.
    kind ``release``: back to pending (or scheduled if ``run_at`` is later than now); the attempt is
    given back (attempts - 1). ``error`` optional, recorded as ``last_error`` only.
    ``max_retries`` (``retry``, and ``archive`` with an ``error``): the retry limit the execution ran
    with, kept on the task with its failures (``TaskRecord.max_retries``) so that readers without the
    handler know it; None changes nothing.
    ``traceback`` (failures only, bounded by ``outcomes.bound_traceback``): replaces the task's
    ``TaskRecord.traceback`` wherever ``max_retries`` is kept; None clears it.
    """

    task_id: str
    token: str
    kind: str  # "complete" | "retry" | "archive" | "release"
    result: str | None = None
    error: str | None = None
    run_at: float | None = None
    reason: ArchiveReason | None = None
    keep_for: float = 3600.0
    max_retries: int | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    """What a heartbeat (``Broker.extend``) learns: the new deadline, and whether cancel was asked."""

    expires_at: float
    cancel_requested: bool = False  # set only by older versions (a cancel now revokes the lease)


#: The most partitions a queue may have: past this each partition's slot window (16384 / N slots) is
#: too narrow to matter and every call over the queue would visit more slots than a cluster has masters.
MAX_PARTITIONS = 1024


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Per-queue settings, stored in the broker so that every process sees them.

    ``max_size``: most unfinished tasks the queue may hold (None: unbounded).
    ``concurrency``: most active tasks across all workers (None: unbounded).
    ``aging``: seconds of waiting that raise a ready task's priority by one step (None: no aging).
    ``partitions``: how many parts the queue is split into where a broker spreads one queue over
    several slots (Redis with a slot per queue, docs/architecture.md "Partitions"); memory, SQLite
    and Redis layout 4 store and report it and keep the queue one.
    """

    name: str
    max_size: int | None = None
    concurrency: int | None = None
    aging: float | None = None
    paused: bool = False
    partitions: int = 1


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue's settings and its task counts per state (keys: every TaskState value and "total")."""

    settings: QueueSettings
    counts: dict[str, int]
    oldest_pending_at: float | None = None  # when the longest-waiting pending task became ready

    @property
    def name(self) -> str:
        """The queue's name (``settings.name``)."""
        return self.settings.name


@fast_init
@dataclass(frozen=True, slots=True)
class Event:
    """A state transition. ``old_state`` None on enqueue; ``new_state`` "deleted" on deletion."""

    task_id: str
    old_state: str | None
    new_state: str
    queue: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker, as its heartbeat reports it."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    last_seen: float = 0.0
    running: tuple[str, ...] = ()  # ids of tasks it is running
    processed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class TaskDeclaration:
    """A task name as a worker serving it registered it: what a producer that enqueues by name needs.

    ``queue``, ``priority``, ``expires`` (seconds, None: never) and ``unique_for`` (seconds, None:
    not unique) are applied at enqueue; ``max_retries``, ``timeout`` and ``retention`` are shown to
    operators (the worker resolves them itself when the task runs). ``declared_at``: when a worker
    last published it.
    """

    name: str
    queue: str = "default"
    priority: int = 0
    expires: float | None = None
    max_retries: int = 3
    timeout: float | None = None
    retention: float = 3600.0
    declared_at: float = 0.0
    unique_for: float | None = None


@dataclass(frozen=True, slots=True)
class BrokerPolicy:
    """Rules a broker applies on its own (when reclaiming leases and cleaning up).

    ``max_stalls``: a task whose lease expires this many times is archived ``poison``.
    ``archive_retention``: seconds an archived task stays readable (default 7 days).
    ``max_archived``: most archived tasks kept per queue; the janitor deletes the oldest beyond.
    """

    max_stalls: int = 3
    archive_retention: float = 7 * 24 * 3600.0
    max_archived: int = 10_000


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A task as users see it: decoded arguments and result, resolved retry budget.

    ``max_retries`` is the limit the task runs with: recorded by the worker that last failed it, else
    given at enqueue, else the reading app's registration of the task; None (unknown) when none of
    these is there, i.e. a task registered only in the workers that no worker has failed yet.
    ``retries_left`` is None exactly when ``max_retries`` is.
    ``finished_at`` is when the task completed or was archived (None while unfinished);
    ``completed_at`` is its deprecated alias, kept for one release.
    ``unique_key``: the key another enqueue is refused by (``DuplicateTask``) while this task is
    unfinished and its window lasts (``unique_for``'s key is a hash of the name and arguments); None
    for a task enqueued without uniqueness.
    """

    id: str
    name: str
    queue: str
    state: TaskState
    args: list[Any]
    kwargs: dict[str, Any]
    attempts: int
    max_retries: int | None
    retries_left: int | None
    next_run_at: float | None
    last_error: str | None
    archive_reason: ArchiveReason | None
    result: Any
    priority: int
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    expires_at: float | None = None
    keep_until: float | None = None
    stalls: int = 0
    errors: tuple[ErrorEntry, ...] = ()
    lease_expires_at: float | None = None
    cancel_requested: bool = False  # set only by older versions: a cancel now archives a running task
    options: dict[str, Any] = field(default_factory=dict)
    payload_error: str | None = None  # set when the stored payload could not be decoded
    options_error: str | None = None  # set when the stored options could not be decoded (then defaults apply)
    traceback: str | None = None  # the (bounded) traceback of its latest failed execution, if it had one
    unique_key: str | None = None  # see the class docstring

    @property
    def completed_at(self) -> float | None:
        """Deprecated alias of ``finished_at`` (it was set for archived tasks too); removed in the next release."""
        warnings.warn("TaskInfo.completed_at is deprecated; use TaskInfo.finished_at", DeprecationWarning, stacklevel=2)
        return self.finished_at
