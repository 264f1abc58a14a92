"""``memory://``: the reference semantics of the Broker contract, in-process and deterministic.

One lock guards plain dicts plus four heaps (ready per queue, due, leases, finished). Heap entries are
invalidated lazily: each task carries a version that every transition bumps, and an entry whose
version is stale is skipped when popped. Every operation is O(log n) amortised.
"""

from __future__ import annotations

import heapq
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace

from conveyor.brokers import transitions
from conveyor.brokers.base import EventCallback, announce_cancel, ready_key
from conveyor.brokers.memory.store import MemoryStore
from conveyor.brokers.transitions import empty_counts
from conveyor.errors import ConfigurationError, InvalidTransition, QueueFull
from conveyor.history import KEEP_MINUTES, QueueMinute, window
from conveyor.model import (
    BrokerPolicy,
    LeaseStatus,
    NewTask,
    Outcome,
    QueueInfo,
    QueueSettings,
    TaskDeclaration,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = ["MemoryBroker"]

_S = TaskState


class MemoryBroker(MemoryStore):
    """An in-process broker. Each instance is isolated; it is thread-safe but not shared across processes."""

    @classmethod
    def from_url(cls, url: str, policy: BrokerPolicy) -> MemoryBroker:
        """``memory://``: nothing more (a host, path or option would be ignored, so it is refused)."""
        if url.rstrip("/").lower() != "memory:":
            raise ConfigurationError(f"memory:// takes no host, path or options: {url!r}")
        return cls(policy)

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[str | None]:
        with self._lock:
            results: list[str | None] = []
            taken: dict[str, str] = {}
            keys: dict[str, str] = {}
            adding: dict[str, int] = {}
            for task in tasks:
                dup = self._duplicate_of(task, now, taken, keys)
                results.append(dup)
                if dup is None:
                    taken[task.id] = task.id
                    if task.unique_key is not None:
                        keys[task.unique_key] = task.id
                    adding[task.queue] = adding.get(task.queue, 0) + 1
            for queue, count in adding.items():
                max_size = self._settings_for(queue).max_size
                if max_size is not None and self._unfinished(queue) + count > max_size:  # O(n): only when bounded
                    raise QueueFull(queue, max_size)
            for task, dup in zip(tasks, results, strict=True):
                if dup is None:
                    self._insert(task, now)
        self._flush_events()
        return results

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        claimed: list[TaskRecord] = []
        with self._lock:
            self._promote_locked(now, len(self._due))
            self._reap_locked(now, len(self._leases) + len(self._expiring))  # all due: leases, then expiry
            for queue in queues:
                settings = self._settings_for(queue)
                if settings.paused:
                    continue
                heap = self._ready.get(queue, [])
                active = None if settings.concurrency is None else self._count(queue, _S.ACTIVE)
                while heap and len(claimed) < limit:
                    if active is not None and active >= (settings.concurrency or 0):
                        break
                    entry = heapq.heappop(heap)
                    if not self._valid(entry):
                        continue
                    rec = self._tasks[entry[2]]
                    if rec.expires_at is not None and rec.expires_at <= now:
                        self._change(rec, transitions.expired(rec, now, self.policy), now)
                        continue
                    change = transitions.claimed(rec, now, secrets.token_hex(16), now + lease_for)
                    claimed.append(self._change(rec, change, now))
                    if active is not None:
                        active += 1
                if len(claimed) >= limit:
                    break
            self._wakes.claimed(now)
        self._flush_events()
        return claimed

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """``WaitsForWork``: block up to ``timeout`` s until a task of ``queues`` may have become claimable
        since this thread's last claim, or (for a claim timed by the wall clock) until the first scheduled
        or retry task of ``queues`` falls due (``wake.py``). True is a hint."""
        return self._wakes.wait(list(queues), timeout, self._next_due)

    def interrupt_waits(self) -> None:
        """``InterruptsWaits``: end the waits in progress (a worker stopping), and the next of each thread
        that claimed before."""
        with self._lock:
            self._wakes.interrupt()

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        applied: list[bool] = []
        with self._lock:
            for outcome in outcomes:
                rec = self._tasks.get(outcome.task_id)
                if rec is None or rec.state is not _S.ACTIVE or rec.lease_token != outcome.token:
                    applied.append(False)
                    continue
                change = transitions.settled(rec, outcome, now, self.policy)
                self._change(rec, change, now)
                if outcome.kind == "complete" and transitions.deleted_at_settle(change["keep_until"], now):
                    self._remove(rec.id, now, report=False)
                self._history.add(rec.queue, outcome.kind, now)
                applied.append(True)
        self._flush_events()
        return applied

    def extend(self, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
        with self._lock:
            rec = self._tasks.get(task_id)
            if rec is None or rec.state is not _S.ACTIVE or rec.lease_token != token:
                return None
            rec = self._change(rec, transitions.extended(now + lease_for), now)
            assert rec.lease_expires_at is not None
            return LeaseStatus(rec.lease_expires_at, rec.cancel_requested)

    def promote(self, now: float, limit: int = 1000) -> int:
        with self._lock:
            moved = self._promote_locked(now, limit)
        self._flush_events()
        return moved

    def reap(self, now: float, limit: int = 1000) -> int:
        with self._lock:
            self._promote_locked(now, len(self._due))
            done = self._reap_locked(now, limit)
        self._flush_events()
        return done

    def clean(self, now: float, limit: int = 1000) -> int:
        with self._lock:
            removed = self._clean_locked(now, limit)
            cap = self.policy.max_archived
            for queue in sorted(self._settings):  # by name, as queues() lists them (every broker alike)
                archived = [r for r in self._tasks.values() if r.queue == queue and r.state is _S.ARCHIVED]
                excess = len(archived) - cap
                if excess > 0 and removed < limit:
                    archived.sort(key=lambda r: (r.finished_at or 0.0, self._seq[r.id]))
                    for rec in archived[: min(excess, limit - removed)]:
                        self._remove(rec.id, now, report=False)
                        removed += 1
            first, _ = window(now, KEEP_MINUTES)
            for key in [key for key in self._history.counts if key[1] < first]:
                del self._history.counts[key]
        return removed

    def history(self, first: int, last: int) -> list[QueueMinute]:
        with self._lock:
            return [row for row in self._history.rows() if first <= row.minute <= last]

    def get(self, task_id: str, now: float) -> TaskRecord | None:
        with self._lock:
            rec = self._tasks.get(task_id)
            return rec if rec is not None and self._visible(rec, now) else None

    def list_tasks(
        self, queue: str, state: TaskState, now: float, offset: int = 0, limit: int = 100
    ) -> list[TaskRecord]:
        state = TaskState(state)
        with self._lock:
            recs = [r for r in self._tasks.values() if r.queue == queue and r.state is state and self._visible(r, now)]
            aging = self._settings_for(queue).aging
            recs.sort(key=lambda r: self._order_key(r, aging))
            return recs[offset : offset + limit]

    def queues(self, now: float) -> list[QueueInfo]:
        with self._lock:
            counts: dict[str, dict[str, int]] = {q: empty_counts() for q in self._settings}
            oldest: dict[str, float] = {}
            for rec in self._tasks.values():
                if not self._visible(rec, now):
                    continue
                bucket = counts.get(rec.queue)
                if bucket is None:
                    bucket = counts[rec.queue] = empty_counts()
                bucket[rec.state.value] += 1
                bucket["total"] += 1
                if rec.state is _S.PENDING:
                    ready = self._ready_at[rec.id]
                    oldest[rec.queue] = min(oldest.get(rec.queue, ready), ready)
            return [QueueInfo(self._settings_for(q), counts[q], oldest.get(q)) for q in sorted(counts)]

    def configure_queue(self, settings: QueueSettings) -> None:
        with self._lock:
            old = self._settings_for(settings.name)
            self._settings[settings.name] = replace(settings, paused=old.paused)
            if old.concurrency != settings.concurrency:  # a raised (or lifted) limit frees slots
                self._wakes.ring(settings.name)
            if old.aging != settings.aging:  # re-key the ready heap: the only rescoring, on config change
                heap = [
                    (
                        ready_key(r.priority, self._ready_at[r.id], settings.aging),
                        self._seq[r.id],
                        r.id,
                        self._ver[r.id],
                    )
                    for r in self._tasks.values()
                    if r.queue == settings.name and r.state is _S.PENDING
                ]
                heapq.heapify(heap)
                self._ready[settings.name] = heap

    def set_paused(self, queue: str, paused: bool) -> None:
        with self._lock:
            old = self._settings_for(queue)
            self._settings[queue] = replace(old, paused=paused)
            if old.paused and not paused:
                self._wakes.ring(queue)

    def run_now(self, task_id: str, now: float) -> None:
        with self._lock:
            rec = self._existing(task_id, now)
            self._change(rec, transitions.run_now(rec, now), now)
        self._flush_events()

    def archive(self, task_id: str, now: float) -> None:
        with self._lock:
            rec = self._existing(task_id, now)
            self._change(rec, transitions.manually_archived(rec, now, self.policy), now)
        self._flush_events()

    def cancel(self, task_id: str, now: float) -> TaskState:
        with self._lock:
            rec = self._existing(task_id, now)
            self._change(rec, transitions.cancelled(rec, now, self.policy), now)
            watchers = list(self._cancel_watchers) if rec.state is _S.ACTIVE else []
        self._flush_events()
        announce_cancel(task_id, watchers)
        return _S.ARCHIVED

    def watch_cancels(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """``AnnouncesCancels``: ``callback(task_id)`` in the thread that cancelled an active task, once
        the cancel is stored."""
        with self._lock:
            self._cancel_watchers.append(callback)

        def unwatch() -> None:
            with self._lock:
                if callback in self._cancel_watchers:
                    self._cancel_watchers.remove(callback)

        return unwatch

    def delete(self, task_id: str, now: float) -> None:
        with self._lock:
            transitions.check_delete(self._existing(task_id, now))
            self._remove(task_id, now, report=True)
        self._flush_events()

    def purge(self, queue: str, state: TaskState, now: float, limit: int | None = None) -> int:
        state = TaskState(state)
        if state is _S.ACTIVE:
            raise InvalidTransition("cannot purge active tasks; cancel them first")
        with self._lock:
            ids = [
                r.id for r in self._tasks.values() if r.queue == queue and r.state is state and self._visible(r, now)
            ]
            if limit is not None:
                ids = ids[:limit]
            for task_id in ids:
                self._remove(task_id, now, report=True)
        self._flush_events()
        return len(ids)

    def register_worker(self, info: WorkerInfo, now: float, ttl: float) -> None:
        with self._lock:
            self._workers[info.id] = (replace(info, last_seen=now), now + ttl)

    def unregister_worker(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)
            self._commands.pop(worker_id, None)

    def command_worker(self, worker_id: str, command: str, now: float, ttl: float) -> None:
        with self._lock:
            self._commands[worker_id] = (command, now + ttl)

    def worker_command(self, worker_id: str, now: float) -> str | None:
        with self._lock:
            command, until = self._commands.get(worker_id, (None, 0.0))
            return command if until > now else None

    def workers(self, now: float) -> list[WorkerInfo]:
        with self._lock:
            return [info for wid, (info, until) in sorted(self._workers.items()) if until > now]

    def forget_queue(self, queue: str) -> int | None:
        with self._lock:
            held = sum(1 for r in self._tasks.values() if r.queue == queue)
            if held:
                return held
            return None if self._settings.pop(queue, None) is None else 0

    def declare_tasks(self, declarations: Sequence[TaskDeclaration]) -> None:
        with self._lock:
            self._declared.update((d.name, d) for d in declarations)

    def declared_tasks(self, names: Sequence[str] | None = None) -> dict[str, TaskDeclaration]:
        with self._lock:
            if names is None:
                return dict(sorted(self._declared.items()))
            return {n: self._declared[n] for n in names if n in self._declared}

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def close(self) -> None:
        """Nothing to release; the data stays readable."""
