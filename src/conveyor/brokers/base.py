"""The storage contract every backend implements, and the ordering rule they share.

A broker is a dumb, atomic state store: it never looks at handlers, backoff policies or clocks. The
app and the worker decide *what* should happen (retry at t, archive with reason r) and the broker
applies each decision atomically, fenced by the lease token. Every time-sensitive call receives
``now`` (epoch seconds) from the caller's clock, so one ``FakeClock`` drives every backend in tests.

The optional capabilities a backend may add (waiting for work, a shared clock, preflight checks, ...)
are Protocols of their own in ``conveyor.brokers.capabilities``, re-exported here; callers test them
with ``isinstance``.

The conformance suite in ``tests/conformance/`` is the real specification: a backend is done when it
passes the whole suite unchanged. The rules, shared by all backends:

* **States.** ``enqueue`` stores a task ``pending`` (or ``scheduled`` when ``run_at > now``). A task is
  *due* when ``next_run_at <= now``; due ``scheduled``/``retry`` tasks become ``pending`` (in ``claim``,
  ``promote`` and ``reap``: whichever runs first). Completed and archived tasks get ``finished_at`` and
  ``keep_until``; from ``keep_until`` on they are invisible to every read (``get``, ``list_tasks``,
  counts) even before ``clean`` deletes them. ``enqueue`` of an id such a task holds replaces it; the
  others stay until ``clean`` (so what ``clean`` returns does not depend on enqueues before it).
* **Ready order.** Among pending tasks of a queue, ``claim`` takes the lowest
  :func:`ready_key` first, ties broken by enqueue sequence. ``ready_at`` is when the task last became
  pending. Without aging this is "highest priority first, then enqueue order"; with ``aging`` a task
  gains one priority step per ``aging`` seconds waited, at O(log n) per operation.
* **Claims.** ``claim`` looks at ``queues`` in the order given (the first queue is drained first) and
  skips paused queues and queues at their ``concurrency`` limit. Each claimed task becomes ``active``
  with a fresh random ``lease_token``, ``lease_expires_at = now + lease_for``, ``started_at = now`` and
  ``attempts + 1``. A pending task whose ``expires_at <= now`` is archived ``expired`` instead of
  being returned.
* **Leases and fencing.** A task whose ``lease_expires_at <= now`` is reclaimed by the next ``claim``
  or ``reap``: ``stalls + 1``; with ``stalls >= policy.max_stalls`` it is archived ``poison``, else it
  is pending again (the expired attempt stays counted). ``settle`` and ``extend`` with a token that is
  not the task's current token change nothing (``settle`` reports False, ``extend`` returns None).
  An active task whose lease expired but was not reclaimed yet can still be settled or extended by
  its holder (its token is still current). ``cancel`` of an active task archives it and revokes its
  lease in one step, so the cancel always wins over its holder's late outcome.
* **Uniqueness.** ``enqueue`` of an id that exists (and is visible) is a duplicate. So is a task whose
  ``unique_key`` is held by another unfinished task whose ``unique_until > now``. Duplicates are not
  written; ``enqueue`` returns the existing id in their slot.
* **Queue limits.** ``max_size`` bounds unfinished tasks per queue: an ``enqueue`` batch that would
  exceed it raises ``QueueFull`` and writes nothing of that batch.
* **Events.** Every transition is reported to subscribers as an :class:`Event` (``old_state`` None on
  enqueue, ``new_state`` ``"deleted"`` on delete/purge). Deletion by retention is not reported. A
  raising subscriber is logged and never breaks the broker. Backends that several processes share
  deliver events made by other processes too (with a documented latency).
* **Retry limits.** ``settle`` keeps an outcome's ``max_retries`` (when set) on its task where it
  records a failure (:func:`records_limit`); reads return it as ``TaskRecord.max_retries``. The same
  failures replace the task's ``TaskRecord.traceback`` with ``outcome.traceback`` (None clears it);
  other outcomes leave it as it was.
* **Errors.** Store faults raise ``BrokerUnavailable`` (or another ``BrokerError``), never a client
  library's exception; a failed call leaves no half-written task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from conveyor.brokers.capabilities import (
    AnnouncesCancels,
    AppliesPolicy,
    ChecksServer,
    ClaimsAfterWait,
    CommandsWorkers,
    DeclaresTasks,
    Finding,
    ForgetsQueues,
    InterruptsWaits,
    KeepsHistory,
    LabelsIds,
    SettlesWithClaim,
    SharesClock,
    WaitsForWork,
)
from conveyor.model import (
    Event,
    LeaseStatus,
    NewTask,
    Outcome,
    QueueInfo,
    QueueSettings,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = [
    "CANCELLABLE",
    "MAX_ERRORS_KEPT",
    "AnnouncesCancels",
    "AppliesPolicy",
    "Broker",
    "ChecksServer",
    "ClaimsAfterWait",
    "CommandsWorkers",
    "DeclaresTasks",
    "EventCallback",
    "Finding",
    "ForgetsQueues",
    "InterruptsWaits",
    "KeepsHistory",
    "LabelsIds",
    "SettlesWithClaim",
    "SharesClock",
    "WaitsForWork",
    "announce_cancel",
    "deliver",
    "ready_key",
    "records_limit",
]

log = logging.getLogger("conveyor.brokers")

EventCallback = Callable[[Event], None]


def deliver(events: Iterable[Event], subscribers: Sequence[EventCallback]) -> None:
    """Call every subscriber with every event, in order; a raising subscriber is logged and skipped."""
    for event in events:
        for callback in subscribers:
            try:
                callback(event)
            except Exception:
                log.exception("event callback %r raised on %r", callback, event)


def announce_cancel(task_id: str, watchers: Sequence[Callable[[str], None]]) -> None:
    """Tell every ``watch_cancels`` watcher that ``task_id`` was cancelled while running; a raising
    watcher is logged and skipped."""
    for callback in watchers:
        try:
            callback(task_id)
        except Exception:
            log.exception("cancel watcher %r raised on task %s", callback, task_id)


#: A task keeps its most recent failures only (``TaskRecord.errors``).
MAX_ERRORS_KEPT = 20

#: The states ``cancel`` archives ``cancelled``: every unfinished one. A running task's lease goes with
#: it, so whatever its holder settles or extends later is fenced: a cancel cannot be overwritten by a
#: handler that finishes anyway (the Redis scripts spell the same set out in ``cancel.lua``).
CANCELLABLE = frozenset({TaskState.SCHEDULED, TaskState.PENDING, TaskState.RETRY, TaskState.ACTIVE})


def ready_key(priority: int, ready_at: float, aging: float | None) -> float:
    """Sort key of a pending task: lower runs first (ties: enqueue sequence).

    With aging, a task's effective priority at time t is ``priority + (t - ready_at) / aging``; the
    order of two tasks by that value is the same at every t, so the key ``ready_at - priority*aging``
    never needs rescoring. Without aging the key is ``-priority``.
    """
    if aging:
        return ready_at - priority * aging
    return float(-priority)


def records_limit(outcome: Outcome) -> bool:
    """Whether ``settle`` keeps ``outcome.max_retries`` on the task: with the failures it records (a
    ``retry``, or an ``archive`` with an error), so a backend can store it beside them."""
    return outcome.kind == "retry" or (outcome.kind == "archive" and outcome.error is not None)


@runtime_checkable
class Broker(Protocol):
    """The storage contract. All methods are thread-safe; all times are epoch seconds."""

    # -- producing -----------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[str | None]:
        """Store new tasks atomically (per call; a backend may document a chunk size).

        Returns, per task, None when stored or the id of the existing task when it was a duplicate
        (not stored). Raises ``QueueFull`` if a queue's ``max_size`` would be exceeded: nothing of
        the batch written, but by a backend that stores a batch in parts (Redis), which names in
        the exception's ``stored`` the ids its earlier parts stored (``ReplicationTimeout`` too).
        """
        ...

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        """Lease up to ``limit`` ready tasks (see the module rules); returns them as now stored."""
        ...

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Apply each outcome if its token still holds the task's lease; True where applied."""
        ...

    def extend(self, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
        """Heartbeat: push the lease to ``now + lease_for``. None if the lease is lost."""
        ...

    # -- maintenance (safe to run from any number of processes) ----------------------------------

    def promote(self, now: float, limit: int = 1000) -> int:
        """Move up to ``limit`` due scheduled/retry tasks to pending, the earliest ``next_run_at`` over
        every queue first (ties by enqueue order); returns how many moved."""
        ...

    def reap(self, now: float, limit: int = 1000) -> int:
        """Promote every due task, then reclaim up to ``limit`` expired leases (pending again, or
        archived poison) and then archive tasks past ``expires_at`` within the same ``limit``, each
        earliest first over every queue (ties by enqueue order); returns count."""
        ...

    def clean(self, now: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` tasks: those past ``keep_until`` first, then each queue's oldest
        archived beyond ``max_archived``, queues by name; returns count."""
        ...

    # -- reading -------------------------------------------------------------------------------

    def get(self, task_id: str, now: float) -> TaskRecord | None:
        """The task, or None if it does not exist or is past its ``keep_until``."""
        ...

    def list_tasks(
        self, queue: str, state: TaskState, now: float, offset: int = 0, limit: int = 100
    ) -> list[TaskRecord]:
        """A page of a queue's tasks in one state.

        Order: pending in claim order; scheduled and retry by ``next_run_at``; active by
        ``started_at``; completed and archived newest ``finished_at`` first. Ties by enqueue order,
        reversed where the order is (finished at one time: the last enqueued first).
        """
        ...

    def queues(self, now: float) -> list[QueueInfo]:
        """Every known queue (one that has held tasks or has settings), sorted by name."""
        ...

    # -- queue settings ------------------------------------------------------------------------

    def configure_queue(self, settings: QueueSettings) -> None:
        """Store a queue's ``max_size``, ``concurrency`` and ``aging`` (``paused`` is ignored here)."""
        ...

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause (claims skip the queue; enqueue and promotion go on) or resume a queue."""
        ...

    # -- admin ---------------------------------------------------------------------------------

    def run_now(self, task_id: str, now: float) -> None:
        """scheduled / retry / archived → pending (an archived task also gets its retries back).

        Raises ``TaskNotFound`` or ``InvalidTransition`` (pending, active, completed).
        """
        ...

    def archive(self, task_id: str, now: float) -> None:
        """scheduled / pending / retry → archived ``manual``. Raises TaskNotFound / InvalidTransition."""
        ...

    def cancel(self, task_id: str, now: float) -> TaskState:
        """scheduled / pending / retry / active → archived ``cancelled`` (:data:`CANCELLABLE`).

        An active task loses its lease at once: its holder's later ``settle`` reports False and its
        ``extend`` returns None (that is how a worker learns of the cancel). Returns the task's state
        after the call (archived). Raises TaskNotFound / InvalidTransition (completed, archived).
        """
        ...

    def delete(self, task_id: str, now: float) -> None:
        """Remove a task in any state but active. Raises TaskNotFound / InvalidTransition (active)."""
        ...

    def purge(self, queue: str, state: TaskState, now: float, limit: int | None = None) -> int:
        """Delete up to ``limit`` (None: all) tasks of one queue in one state (not active)."""
        ...

    # -- workers and events ----------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo, now: float, ttl: float) -> None:
        """Record a worker heartbeat, visible in ``workers()`` until ``now + ttl``."""
        ...

    def unregister_worker(self, worker_id: str) -> None:
        """Forget a worker (clean shutdown)."""
        ...

    def workers(self, now: float) -> list[WorkerInfo]:
        """Live workers (heartbeat not yet past its ttl), sorted by id."""
        ...

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every transition; returns a function that unsubscribes.

        Events of one queue come in the order of its transitions; events of different queues may come
        in another order than they happened (on Redis each queue's slot has an event stream of its own).
        """
        ...

    def close(self) -> None:
        """Release connections and background threads. Idempotent."""
        ...
