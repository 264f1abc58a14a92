"""``Inspector``: the admin API behind the CLI and the dashboard (no admin logic lives elsewhere)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor._validate import MOST_COUNT, check_int, check_queue, check_task_id
from conveyor.brokers.base import CommandsWorkers, ForgetsQueues, KeepsHistory
from conveyor.commands import COMMAND_TTL, check_command, stronger
from conveyor.errors import ConfigurationError, InvalidTransition, QueueNotFound
from conveyor.history import KEEP_MINUTES, MinuteCounts, fold, window
from conveyor.model import QueueInfo, TaskInfo, TaskState, WorkerInfo
from conveyor.selection import MAX_SCAN, BulkResult, Selection, TaskFilter, apply_all, select

if TYPE_CHECKING:
    from conveyor.host import Host

__all__ = ["MOST_LIMIT", "MOST_OFFSET", "Inspector", "TimelineEntry"]

#: The largest page ``Inspector.list`` reads, and the farthest it starts: far past any queue, and
#: within what every store's integers hold (SQLite's 64 bits; Redis's scripts count in doubles).
MOST_LIMIT = 1_000_000
MOST_OFFSET = 10**12


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One moment in a task's life, for display: ``at`` (epoch seconds), ``event``, optional ``detail``."""

    at: float
    event: str
    detail: str = ""


def _state(value: TaskState | str) -> TaskState:
    if isinstance(value, TaskState):
        return value
    if not isinstance(value, str):
        raise TypeError(f"state must be a TaskState or str, not {type(value).__name__}")
    try:
        return TaskState(value)
    except ValueError:
        known = ", ".join(s.value for s in TaskState)
        raise ValueError(f"unknown state {value!r}; one of: {known}") from None


class Inspector:
    """List, inspect and act on tasks and queues. Every call reads or writes the broker at once."""

    def __init__(self, app: Host) -> None:
        self.app = app

    def queues(self) -> list[QueueInfo]:
        """Every known queue with its settings, paused flag and counts per state."""
        return self.app.broker.queues(self.app.now())

    def list(self, queue: str, state: TaskState | str, offset: int = 0, limit: int = 50) -> builtins.list[TaskInfo]:
        """A page of tasks of ``queue`` in ``state`` (order: see ``Broker.list_tasks``)."""
        check_queue(queue)
        check_int("offset", offset, maximum=MOST_OFFSET)  # past what a store's integers hold: refused here
        check_int("limit", limit, minimum=1, maximum=MOST_LIMIT)
        records = self.app.broker.list_tasks(queue, _state(state), self.app.now(), offset, limit)
        return [self.app.to_info(record) for record in records]

    def get(self, task_id: str) -> TaskInfo:
        """The task as stored now (``Conveyor.get``). Raises TaskNotFound."""
        return self.app.get(check_task_id(task_id))

    def run_now(self, task_id: str) -> None:
        """scheduled / retry / archived → pending."""
        self.app.broker.run_now(check_task_id(task_id), self.app.now())

    def archive(self, task_id: str) -> None:
        """scheduled / pending / retry → archived (``manual``)."""
        self.app.broker.archive(check_task_id(task_id), self.app.now())

    def delete(self, task_id: str) -> None:
        """Remove a task that is not active."""
        self.app.broker.delete(check_task_id(task_id), self.app.now())

    def cancel(self, task_id: str) -> TaskState:
        """Any unfinished task → archived ``cancelled`` (returned), a running one included: its lease is
        revoked, so its handler is stopped (async: cancelled; sync: ``ctx.cancelled``; ``--processes``:
        its child is stopped after a grace) and nothing it settles later counts. See docs/reliability.md."""
        return self.app.broker.cancel(check_task_id(task_id), self.app.now())

    def queue(self, name: str) -> QueueInfo:
        """One known queue. Raises QueueNotFound (naming the known ones)."""
        check_queue(name)
        queues = self.queues()
        for info in queues:
            if info.name == name:
                return info
        raise QueueNotFound(name, tuple(q.name for q in queues))

    def pause(self, queue: str) -> None:
        """Pause ``queue``, known or not yet (a queue may be paused ahead of its first task; the CLI
        asks for ``--create`` then, so a typo does not make a new, paused queue)."""
        self.app.broker.set_paused(check_queue(queue), True)

    def resume(self, queue: str) -> None:
        """Let workers claim from ``queue`` again (see ``pause``)."""
        self.app.broker.set_paused(check_queue(queue), False)

    def delete_queue(self, queue: str) -> None:
        """Forget an empty queue: its settings and its place in ``queues()``. Raises QueueNotFound, or
        InvalidTransition while it holds tasks (purge them first)."""
        broker = self.app.broker
        if not isinstance(broker, ForgetsQueues):
            raise InvalidTransition(f"this broker ({type(broker).__name__}) cannot delete queues")
        held = broker.forget_queue(check_queue(queue))
        if held is None:
            raise QueueNotFound(queue, tuple(q.name for q in self.queues()))
        if held:
            raise InvalidTransition(f"queue {queue!r} still holds {held} task(s); purge them first")

    def purge(self, queue: str, state: TaskState | str, limit: int | None = None) -> int:
        """Delete every task of ``queue`` in ``state`` (not active); returns how many."""
        check_int("limit", limit, minimum=1, maximum=MOST_COUNT, allow_none=True)
        return self.app.broker.purge(check_queue(queue), _state(state), self.app.now(), limit)

    def workers(self) -> builtins.list[WorkerInfo]:
        """Live workers and what they run."""
        return self.app.broker.workers(self.app.now())

    def command_worker(self, worker_id: str, command: str) -> None:
        """Send ``quiet`` or ``stop`` to a live worker (``conveyor.commands``): it obeys at its next
        registry beat. Raises InvalidTransition for a worker that is not live or a broker without the
        capability."""
        check_command(command)
        broker = self.app.broker
        if not isinstance(broker, CommandsWorkers):
            raise InvalidTransition(f"this broker ({type(broker).__name__}) cannot send commands to workers")
        if worker_id not in {w.id for w in self.workers()}:
            raise InvalidTransition(f"no live worker {worker_id!r}")
        now = self.app.now()
        broker.command_worker(worker_id, stronger(broker.worker_command(worker_id, now), command), now, COMMAND_TTL)

    def worker_command(self, worker_id: str) -> str | None:
        """The command a worker was sent and has not outlived (None: none, or no such capability)."""
        broker = self.app.broker
        return broker.worker_command(worker_id, self.app.now()) if isinstance(broker, CommandsWorkers) else None

    def history(self, queue: str | None = None, minutes: int = 60) -> builtins.list[MinuteCounts]:
        """Executions settled per minute over the last ``minutes`` (at most 24 h), oldest first, ending
        with the current (partial) minute; of ``queue``, or of every queue. Raises
        ``ConfigurationError`` for a broker that keeps no history (see ``conveyor.history``)."""
        if queue is not None:
            check_queue(queue)
        check_int("minutes", minutes, minimum=1)
        if minutes > KEEP_MINUTES:
            raise ValueError(f"minutes must be <= {KEEP_MINUTES} (24 h are kept), got {minutes!r}")
        broker = self.app.broker
        if not isinstance(broker, KeepsHistory):
            raise ConfigurationError(f"{type(broker).__name__} keeps no per-minute history")
        first, last = window(self.app.now(), minutes)
        return fold(broker.history(first, last), first, last, queue)

    def select(self, flt: TaskFilter, max_scan: int = MAX_SCAN) -> Selection:
        """Tasks across queues that ``flt`` keeps, among at most ``max_scan`` looked at (see
        ``conveyor.selection``; ``Selection.cut_short`` says when the bound stopped the scan)."""
        return select(self, flt, max_scan)

    def apply_all(self, flt: TaskFilter, action: str, *, batch: int = 500, max_tasks: int | None = None) -> BulkResult:
        """``retry`` or ``delete`` every task ``flt`` keeps, in batches of ``batch`` (see
        ``conveyor.selection.apply_all``)."""
        return apply_all(self, flt, action, batch=batch, max_tasks=max_tasks)

    @staticmethod
    def timeline(info: TaskInfo) -> builtins.list[TimelineEntry]:
        """The known moments of a task, oldest first: enqueue, each recorded failure, the latest start,
        the next run, the end, and the expiry / retention deadlines still ahead."""
        entries = [TimelineEntry(info.enqueued_at, "enqueued", f"queue {info.queue}")]
        if info.started_at is not None:
            entries.append(TimelineEntry(info.started_at, "started", f"attempt {info.attempts}"))
        entries += [TimelineEntry(e.at, "failed", f"attempt {e.attempt}: {e.error}") for e in info.errors]
        if info.next_run_at is not None:
            detail = "retry due" if info.state == TaskState.RETRY else "due to run"
            entries.append(TimelineEntry(info.next_run_at, "due", detail))
        if info.finished_at is not None:
            detail = f"reason {info.archive_reason.value}" if info.archive_reason is not None else ""
            entries.append(TimelineEntry(info.finished_at, info.state.value, detail))
        if info.expires_at is not None and info.finished_at is None:
            entries.append(TimelineEntry(info.expires_at, "expires", "archived if not started by then"))
        if info.keep_until is not None:
            entries.append(TimelineEntry(info.keep_until, "forgotten", "retention ends"))
        return sorted(entries, key=lambda entry: entry.at)  # stable: ties keep the causal order above
