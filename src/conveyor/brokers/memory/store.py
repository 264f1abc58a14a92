"""The memory broker's state and indexing: plain dicts plus heaps invalidated lazily.

The transitions themselves are ``conveyor.brokers.transitions``; :meth:`MemoryStore._change` stores
and indexes what one returns, and rings the task's queue when it may have become claimable
(``wake.py``: how an idle consumer waits for work).

Each task carries a version that every transition bumps (from one counter, never reused); a heap
entry whose version is stale is skipped when popped, so every operation is O(log n) amortised.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from conveyor.brokers import transitions
from conveyor.brokers.base import EventCallback, deliver, ready_key
from conveyor.brokers.memory.wake import Wakes
from conveyor.brokers.transitions import READY_AT, Change
from conveyor.errors import TaskNotFound
from conveyor.history import Tally
from conveyor.model import (
    UNFINISHED,
    BrokerPolicy,
    Event,
    NewTask,
    QueueSettings,
    TaskDeclaration,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = ["MemoryStore"]

_S = TaskState


class MemoryStore:
    """State of one in-memory broker: its tasks, their indexes, and the steps every operation is made of."""

    def __init__(self, policy: BrokerPolicy | None = None) -> None:
        self.policy = policy or BrokerPolicy()
        self._lock = threading.RLock()
        self._tasks: dict[str, TaskRecord] = {}
        self._seq: dict[str, int] = {}
        self._ver: dict[str, int] = {}
        self._ready_at: dict[str, float] = {}
        self._next_seq = 0
        self._next_version = 0
        self._ready: dict[str, list[tuple[float, int, str, int]]] = {}
        self._due: list[tuple[float, int, str, int]] = []
        self._due_of: dict[str, list[tuple[float, int, str, int]]] = {}  # the same entries, by queue
        self._leases: list[tuple[float, int, str, int]] = []
        self._finished: list[tuple[float, int, str, int]] = []
        self._expiring: list[tuple[float, int, str, int]] = []
        self._unique: dict[str, str] = {}
        self._unique_until: dict[str, float] = {}
        self._settings: dict[str, QueueSettings] = {}
        self._workers: dict[str, tuple[WorkerInfo, float]] = {}
        self._commands: dict[str, tuple[str, float]] = {}  # worker id -> (command, until)
        self._declared: dict[str, TaskDeclaration] = {}
        self._subscribers: list[EventCallback] = []
        self._cancel_watchers: list[Callable[[str], None]] = []  # see MemoryBroker.watch_cancels
        self._pending_events: list[Event] = []
        self._history = Tally()  # the per-minute counters themselves (conveyor.history)
        self._wakes = Wakes(self._lock)

    def _settings_for(self, queue: str) -> QueueSettings:
        return self._settings.get(queue) or QueueSettings(name=queue)

    def _put(self, rec: TaskRecord, old: TaskState | None, now: float) -> TaskRecord:
        """Store ``rec`` as the task's new version and index it for its state."""
        self._next_version += 1  # global, never reused: a removed id's stale heap entries stay stale
        version = self._next_version
        self._ver[rec.id] = version
        self._tasks[rec.id] = rec
        seq = self._seq[rec.id]
        if rec.state is _S.PENDING:
            aging = self._settings_for(rec.queue).aging
            key = ready_key(rec.priority, self._ready_at[rec.id], aging)
            heapq.heappush(self._ready.setdefault(rec.queue, []), (key, seq, rec.id, version))
            self._wakes.ring(rec.queue)
        elif rec.state in (_S.SCHEDULED, _S.RETRY):
            assert rec.next_run_at is not None
            entry = (rec.next_run_at, seq, rec.id, version)
            heapq.heappush(self._due, entry)
            heapq.heappush(self._due_of.setdefault(rec.queue, []), entry)
            self._wakes.stir()  # a waiter on its queue may have to wake sooner
        elif rec.state is _S.ACTIVE:
            assert rec.lease_expires_at is not None
            heapq.heappush(self._leases, (rec.lease_expires_at, seq, rec.id, version))
        else:
            assert rec.keep_until is not None
            heapq.heappush(self._finished, (rec.keep_until, seq, rec.id, version))
        if rec.expires_at is not None and rec.state in (_S.PENDING, _S.SCHEDULED, _S.RETRY):
            heapq.heappush(self._expiring, (rec.expires_at, seq, rec.id, version))
        if old is _S.ACTIVE and rec.state is not _S.ACTIVE and self._settings_for(rec.queue).concurrency is not None:
            self._wakes.ring(rec.queue)  # a slot is free: a pending task held back by the limit is claimable
        if old is not rec.state:
            self._pending_events.append(Event(rec.id, old and old.value, rec.state.value, rec.queue, now))
        return rec

    def _valid(self, entry: tuple[float, int, str, int]) -> bool:
        return self._ver.get(entry[2]) == entry[3]

    def _remove(self, task_id: str, now: float, *, report: bool) -> None:
        rec = self._tasks.pop(task_id)
        self._ver.pop(task_id, None)
        self._seq.pop(task_id, None)
        self._ready_at.pop(task_id, None)
        if rec.unique_key is not None and self._unique.get(rec.unique_key) == task_id:
            del self._unique[rec.unique_key]
            self._unique_until.pop(rec.unique_key, None)
        if report:
            self._pending_events.append(Event(task_id, rec.state.value, "deleted", rec.queue, now))

    def _visible(self, rec: TaskRecord | None, now: float) -> bool:
        return rec is not None and (rec.keep_until is None or now < rec.keep_until)

    def _flush_events(self) -> None:
        """Deliver queued events outside the lock; a raising callback is logged and skipped."""
        with self._lock:
            events, self._pending_events = self._pending_events, []
            subscribers = list(self._subscribers)
        deliver(events, subscribers)

    def _change(self, rec: TaskRecord, change: Change, now: float) -> TaskRecord:
        """Apply a rule's ``change`` (``conveyor.brokers.transitions``) to ``rec`` and store the result."""
        ready_at = change.pop(READY_AT, None)
        if ready_at is not None:
            self._ready_at[rec.id] = ready_at
        return self._put(replace(rec, **change), rec.state, now)

    def _promote_locked(self, now: float, limit: int) -> int:
        moved = 0
        while self._due and self._due[0][0] <= now and moved < limit:
            entry = heapq.heappop(self._due)
            if not self._valid(entry):
                continue
            rec = self._tasks[entry[2]]
            self._change(rec, transitions.promoted(rec), now)
            self._next_due_of(rec.queue)  # drops its entry there (the first valid one), and stale ones above
            moved += 1
        return moved

    def _next_due_of(self, queue: str) -> float | None:
        """When the first scheduled or retry task of ``queue`` falls due (None: it has none)."""
        heap = self._due_of.get(queue)
        while heap and not self._valid(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _next_due(self, queues: Sequence[str]) -> float | None:
        """When the first scheduled or retry task of ``queues`` falls due (None: they have none)."""
        return min((due for queue in queues if (due := self._next_due_of(queue)) is not None), default=None)

    def _reap_locked(self, now: float, limit: int) -> int:
        done = 0
        while self._leases and self._leases[0][0] <= now and done < limit:
            entry = heapq.heappop(self._leases)
            if not self._valid(entry):
                continue
            rec = self._tasks[entry[2]]
            self._change(rec, transitions.reaped(rec, now, self.policy), now)
            done += 1
        while self._expiring and self._expiring[0][0] <= now and done < limit:
            entry = heapq.heappop(self._expiring)
            if not self._valid(entry):
                continue
            rec = self._tasks[entry[2]]
            self._change(rec, transitions.expired(rec, now, self.policy), now)
            done += 1
        return done

    def _clean_locked(self, now: float, limit: int) -> int:
        removed = 0
        while self._finished and self._finished[0][0] <= now and removed < limit:
            entry = heapq.heappop(self._finished)
            if self._valid(entry):
                self._remove(entry[2], now, report=False)
                removed += 1
        return removed

    def _duplicate_of(self, task: NewTask, now: float, taken: dict[str, str], keys: dict[str, str]) -> str | None:
        if task.id in taken or self._visible(self._tasks.get(task.id), now):
            return task.id
        if task.unique_key is None:
            return None
        if task.unique_key in keys:
            return keys[task.unique_key]
        holder = self._unique.get(task.unique_key)
        if holder is None:
            return None
        rec = self._tasks.get(holder)
        if rec is not None and rec.state in UNFINISHED and now < self._unique_until[task.unique_key]:
            return holder
        return None

    def _unfinished(self, queue: str) -> int:
        return sum(1 for rec in self._tasks.values() if rec.queue == queue and rec.state in UNFINISHED)

    def _insert(self, task: NewTask, now: float) -> None:
        if task.id in self._tasks:  # invisible (past retention): replaced
            self._remove(task.id, now, report=False)
        due = transitions.due_after(task.run_at, now)
        self._next_seq += 1
        self._seq[task.id] = self._next_seq
        self._ready_at[task.id] = now
        if task.unique_key is not None and task.unique_until is not None:
            self._unique[task.unique_key] = task.id
            self._unique_until[task.unique_key] = task.unique_until
        rec = TaskRecord(
            id=task.id,
            name=task.name,
            queue=task.queue,
            state=_S.SCHEDULED if due is not None else _S.PENDING,
            payload=task.payload,
            options=task.options,
            priority=task.priority,
            enqueued_at=now,
            first_due_at=due if due is not None else now,
            next_run_at=due,
            expires_at=task.expires_at,
            unique_key=task.unique_key,
        )
        self._settings.setdefault(task.queue, QueueSettings(name=task.queue))
        self._put(rec, None, now)

    def _count(self, queue: str, state: TaskState) -> int:
        return sum(1 for rec in self._tasks.values() if rec.queue == queue and rec.state is state)

    def _order_key(self, rec: TaskRecord, aging: float | None) -> tuple[float, int]:
        seq = self._seq[rec.id]
        if rec.state is _S.PENDING:
            return (ready_key(rec.priority, self._ready_at[rec.id], aging), seq)
        if rec.state in (_S.SCHEDULED, _S.RETRY):
            return (rec.next_run_at or 0.0, seq)
        if rec.state is _S.ACTIVE:
            return (rec.started_at or 0.0, seq)
        return (-(rec.finished_at or 0.0), -seq)

    def _existing(self, task_id: str, now: float) -> TaskRecord:
        rec = self._tasks.get(task_id)
        if rec is None or not self._visible(rec, now):
            raise TaskNotFound(task_id)
        return rec
