"""Conveyor's exceptions.

Everything Conveyor raises on its own account derives from one root::

    ConveyorError
    ├── ConfigurationError        bad URL, bad setting, unsupported backend   (also ValueError)
    │   └── UnknownBackoff        no backoff policy is registered under that kind
    ├── TaskNotFound              no task with that id (or past its retention) (also KeyError)
    ├── DuplicateTask             task id taken, or a unique task is still unfinished; ``.existing_id``
    ├── QueueFull                 the queue's ``max_size`` would be exceeded; nothing was written (on
    │                             Redis, a long call's earlier parts may be: ``.stored``)
    ├── QueueNotFound             no queue of that name is known (also KeyError)
    ├── LeaseLost                 the lease expired or was taken over; the call changed nothing
    ├── InvalidTransition         an admin action that does not apply to the task's state
    ├── UnknownTask               no handler is registered under that name
    ├── SerializationError        arguments or result cannot be encoded (or decoded) as JSON
    ├── TaskFailed                ``TaskHandle.result()`` on a task that ended archived
    ├── TaskTimeout               a handler ran past its timeout (retryable)
    ├── ResultTimeout             ``TaskHandle.result(timeout=...)`` gave up waiting (also TimeoutError)
    └── BrokerError               the store misbehaved
        ├── BrokerUnavailable     the store cannot be reached (or stays busy) within the time allowed
        ├── ReplicationTimeout    an enqueue reached fewer replicas than ``wait_replicas`` in time;
        │                         ``.withdrawn`` ids were removed, ``.started`` ids already claimed,
        │                         ``.stored`` what it left to run
        └── SchemaError           the store's data was written by an incompatible (newer) version

Wrong argument *types* raise the builtin ``TypeError`` and wrong values ``ValueError`` (our
``ConfigurationError`` is one), at the call that received them.

Control flow for handlers is kept apart from the tree: raise ``Retry(delay=...)`` to ask for a retry,
``PermanentError`` to archive the task at once without retrying.
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "BrokerUnavailable",
    "ConfigurationError",
    "ConveyorError",
    "DuplicateTask",
    "InvalidTransition",
    "LeaseLost",
    "PermanentError",
    "QueueFull",
    "QueueNotFound",
    "ReplicationTimeout",
    "ResultTimeout",
    "Retry",
    "SchemaError",
    "SerializationError",
    "TaskFailed",
    "TaskNotFound",
    "TaskTimeout",
    "UnknownBackoff",
    "UnknownTask",
]


class ConveyorError(Exception):
    """Root of every error Conveyor raises on its own account."""


class ConfigurationError(ConveyorError, ValueError):
    """A URL, setting or option is invalid or names something unsupported."""


class UnknownBackoff(ConfigurationError):
    """No backoff policy is registered under this kind in this process (see ``register_backoff``)."""


class TaskNotFound(ConveyorError, KeyError):
    """No task has this id (it never existed, was deleted, or is past its retention)."""

    def __init__(self, task_id: str, why: str | None = None) -> None:
        super().__init__(task_id)
        self.task_id = task_id
        self.why = why  # what is known of where it went, if anything

    def __str__(self) -> str:
        return f"task not found: {self.task_id!r}" + (f" ({self.why})" if self.why else "")


class DuplicateTask(ConveyorError):
    """The task id is taken, or an equal unique task is still unfinished. Nothing was written."""

    def __init__(self, existing_id: str) -> None:
        super().__init__(f"duplicate task; existing task id: {existing_id!r}")
        self.existing_id = existing_id


class _PartlyStored:
    """An enqueue refused after part of its call was stored: ``stored`` holds the ids of the call's
    tasks it left to run (``Conveyor.enqueue_many``: in the order of its calls, and ``stored_calls``
    their places in the calls given). Only Redis stores a call in parts (500 tasks per queue at a
    time, and ``wait_replicas`` is Redis's); elsewhere ``stored`` is empty."""

    stored: tuple[str, ...] = ()
    stored_calls: tuple[int, ...] = ()

    def _partly(self, message: str) -> str:
        if not self.stored:
            return message
        return f"{message}; {len(self.stored)} task(s) of the call stay stored and will run"


class QueueFull(_PartlyStored, ConveyorError):
    """The queue holds ``max_size`` unfinished tasks already. Nothing was written, but on Redis by a
    batch of more than 500 tasks (or over several queues): it is stored a call of up to 500 per queue
    at a time, and the calls before the refused one stay written, their ids in ``stored``."""

    def __init__(self, queue: str, max_size: int, stored: tuple[str, ...] = ()) -> None:
        super().__init__(f"queue {queue!r} is full (max_size={max_size})")
        self.queue = queue
        self.max_size = max_size
        self.stored = stored

    def __str__(self) -> str:
        return self._partly(super().__str__())


class QueueNotFound(ConveyorError, KeyError):
    """No queue of this name is known (it never held a task nor had settings, or was deleted)."""

    def __init__(self, queue: str, known: tuple[str, ...] = ()) -> None:
        super().__init__(queue)
        self.queue = queue
        self.known = known

    def __str__(self) -> str:
        return f"queue not found: {self.queue!r}" + (f" (known: {', '.join(self.known)})" if self.known else "")


class LeaseLost(ConveyorError):
    """The caller's lease on the task expired or was superseded; the call changed nothing."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"lease lost on task {task_id!r}")
        self.task_id = task_id


class InvalidTransition(ConveyorError):
    """The requested action does not apply to the task in its current state."""


class UnknownTask(ConveyorError):
    """No handler is registered under this task name."""


class SerializationError(ConveyorError, ValueError):
    """A value cannot be encoded as (or decoded from) the wire format."""


class TaskFailed(ConveyorError):
    """The task ended archived; ``reason`` and ``error`` say why."""

    def __init__(self, task_id: str, reason: str | None, error: str | None) -> None:
        # a task cancelled or archived by hand has no error to tell
        super().__init__(f"task {task_id!r} archived ({reason})" + (f": {error}" if error is not None else ""))
        self.task_id = task_id
        self.reason = reason
        self.error = error


class TaskTimeout(ConveyorError):
    """The handler ran past its timeout. Retryable like any other error."""


class ResultTimeout(ConveyorError, TimeoutError):
    """Waiting for a task's result took longer than the timeout given."""


class BrokerError(ConveyorError):
    """The store behind the broker misbehaved."""


class BrokerUnavailable(BrokerError):
    """The store cannot be reached, or stayed busy, within the time allowed."""


class ReplicationTimeout(_PartlyStored, BrokerError):
    """An enqueue was written on the master but fewer than ``wanted`` replicas confirmed it in time.

    A failover now could lose it, so the broker withdrew what it could: ``withdrawn`` holds the ids
    removed (never claimed: enqueueing them again is safe), ``started`` the ids a worker had already
    claimed in the meantime (they ran or run; enqueueing them again may run them twice), ``gone`` the
    ids no longer stored at all (deleted meanwhile, finished and not kept, or lost in a failover: look
    at what they were for before enqueueing them again). ``acknowledged`` is how many replicas did
    confirm. The withdrawal covers the call that was not confirmed (500 tasks per queue a call):
    ``stored`` names what the whole enqueue left to run, ``started`` and, of a longer one, the tasks
    of its earlier calls, each confirmed by the replicas.
    """

    def __init__(
        self,
        wanted: int,
        acknowledged: int,
        withdrawn: tuple[str, ...] = (),
        started: tuple[str, ...] = (),
        gone: tuple[str, ...] = (),
        stored: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            f"the enqueue reached {acknowledged} of the {wanted} replica(s) asked for (wait_replicas) in time; "
            f"withdrawn: {len(withdrawn)} task(s), already started: {len(started)}, gone: {len(gone)}"
        )
        self.wanted = wanted
        self.acknowledged = acknowledged
        self.withdrawn = withdrawn
        self.started = started
        self.gone = gone
        self.stored = stored

    def __str__(self) -> str:
        return self._partly(super().__str__())


class SchemaError(BrokerError):
    """The store holds data of an incompatible (e.g. newer) schema version; it was left untouched."""


class Retry(Exception):
    """Raised by a handler to ask for a retry, after ``delay`` seconds (None: the task's backoff).

    A ``Retry`` consumes one retry like any failure; with no retries left the task is archived
    with reason ``failed``.
    """

    def __init__(self, delay: float | None = None, message: str = "") -> None:
        super().__init__(message or "retry requested")
        if delay is not None:
            from conveyor._validate import check_seconds

            check_seconds("delay", delay)
        self.delay = delay


class PermanentError(Exception):
    """Raised by a handler (directly or subclassed) to archive the task at once, without retry."""
