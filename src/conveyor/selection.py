"""Selections of tasks across queues: the filters behind the dashboard's failed view and search, and
"retry / delete all matching" applied server-side in batches (usable from the CLI as well).

A selection reads the broker's admin listing page by page (``Broker.list_tasks``) over the chosen
queues and states and keeps the tasks a :class:`TaskFilter` accepts. Reads for display are bounded
(``max_scan`` tasks looked at): the result says when the scan was cut short. A bulk action first
gathers the ids of every match, then acts on them in batches; a task that changed meanwhile (retried,
deleted or started by someone else) is counted as not changed, never acted on twice.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from conveyor.errors import ConveyorError
from conveyor.model import ArchiveReason, QueueInfo, TaskInfo, TaskState

__all__ = [
    "BULK_ACTIONS",
    "Admin",
    "BulkResult",
    "Selection",
    "TaskFilter",
    "apply_all",
    "call_text",
    "failed_at",
    "parse_states",
    "select",
]


class Admin(Protocol):
    """What a selection uses of the ``Inspector`` (which passes itself): it lists and acts through it."""

    def queues(self) -> builtins.list[QueueInfo]: ...

    def list(self, queue: str, state: TaskState | str, offset: int = 0, limit: int = 50) -> builtins.list[TaskInfo]: ...

    def run_now(self, task_id: str) -> None: ...

    def delete(self, task_id: str) -> None: ...


#: Tasks read per broker listing call.
PAGE = 200
#: Default bound on the tasks a display read looks at.
MAX_SCAN = 20_000
#: Failure states: what the failed view shows by default.
FAILED_STATES = (TaskState.RETRY, TaskState.ARCHIVED)


def failed_at(info: TaskInfo) -> float | None:
    """When the task last failed or ended: its finish time, else its latest recorded failure."""
    if info.finished_at is not None:
        return info.finished_at
    return info.errors[-1].at if info.errors else None


def _lower(value: str | None) -> str | None:
    value = (value or "").strip()
    return value.lower() or None


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks a selection keeps. Text matches are case-insensitive substrings; empty means any.

    ``states``: the states read (default: retry and archived). ``queues``: the queues read (default:
    every known queue). ``name``: in the task name. ``reason``: the archive reason. ``error``: in the
    last error. ``text``: in the id, name, arguments (as JSON) or last error (the search box).
    ``since`` / ``until``: bounds on :func:`failed_at` (epoch seconds), for failure states.
    """

    states: tuple[TaskState, ...] = FAILED_STATES
    queues: tuple[str, ...] = ()
    name: str | None = None
    reason: ArchiveReason | None = None
    error: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None

    def __post_init__(self) -> None:
        if not self.states:
            raise ValueError("a selection needs at least one state")
        object.__setattr__(self, "states", tuple(TaskState(s) for s in self.states))
        if self.reason is not None:
            object.__setattr__(self, "reason", ArchiveReason(self.reason))
        for attr in ("name", "error", "text"):
            object.__setattr__(self, attr, _lower(getattr(self, attr)))

    def matches(self, info: TaskInfo) -> bool:
        if self.name and self.name not in info.name.lower():
            return False
        if self.reason is not None and info.archive_reason != self.reason:
            return False
        error = (info.last_error or "").lower()
        if self.error and self.error not in error:
            return False
        if self.since is not None or self.until is not None:
            at = failed_at(info)
            if at is None or (self.since is not None and at < self.since):
                return False
            if self.until is not None and at > self.until:
                return False
        if self.text:
            # the arguments as pages show them (JSON: "x", null, true), not as Python prints them
            haystack = f"{info.id}\n{info.name}\n{call_text(info.args, info.kwargs)}\n{error}".lower()
            if self.text not in haystack:
                return False
        return True


@dataclass
class Selection:
    """The matches found (newest failure first within failure states), how many tasks were looked at,
    and whether the scan stopped at its bound before the end (then more may match)."""

    tasks: list[TaskInfo] = field(default_factory=list)
    scanned: int = 0
    cut_short: bool = False


@dataclass
class BulkResult:
    """What a bulk action did: ``matched`` ids gathered, ``done`` changed, ``failed`` not changed (the
    first reason in ``why``), ``batches`` run, and ``cut_short`` when ``max_tasks`` stopped it."""

    matched: int = 0
    done: int = 0
    failed: int = 0
    batches: int = 0
    why: str = ""
    cut_short: bool = False


def _pages(inspector: Admin, flt: TaskFilter) -> Iterator[list[TaskInfo]]:
    queues = flt.queues or tuple(q.name for q in inspector.queues())
    for queue in queues:
        for state in flt.states:
            offset = 0
            while True:
                page = inspector.list(queue, state, offset=offset, limit=PAGE)
                if page:
                    yield page
                if len(page) < PAGE:
                    break
                offset += PAGE


def select(inspector: Admin, flt: TaskFilter, max_scan: int = MAX_SCAN) -> Selection:
    """The tasks ``flt`` keeps among at most ``max_scan`` looked at."""
    found = Selection()
    for page in _pages(inspector, flt):
        room = max_scan - found.scanned
        if room <= 0:
            found.cut_short = True
            break
        found.scanned += min(room, len(page))
        found.tasks += [info for info in page[:room] if flt.matches(info)]
        if len(page) > room:
            found.cut_short = True
            break
    found.tasks.sort(key=lambda info: -(failed_at(info) or info.enqueued_at))
    return found


BULK_ACTIONS: dict[str, Callable[[Admin, str], object]] = {
    "retry": lambda inspector, task_id: inspector.run_now(task_id),
    "delete": lambda inspector, task_id: inspector.delete(task_id),
}


def apply_all(
    inspector: Admin,
    flt: TaskFilter,
    action: str,
    *,
    batch: int = 500,
    max_tasks: int | None = None,
    progress: Callable[[BulkResult], None] | None = None,
) -> BulkResult:
    """Apply ``action`` (``retry``: run now; ``delete``) to every task ``flt`` keeps, ``batch`` at a
    time; ``progress`` is called once the matches are known, then after each batch. Ids are gathered
    before any change, so the listing does not shift under the scan."""
    if action not in BULK_ACTIONS:
        raise ValueError(f"unknown bulk action {action!r}; one of: {', '.join(BULK_ACTIONS)}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    result = BulkResult()
    ids: list[str] = []
    for page in _pages(inspector, flt):
        ids += [info.id for info in page if flt.matches(info)]
        if max_tasks is not None and len(ids) >= max_tasks:
            result.cut_short = len(ids) > max_tasks
            ids = ids[:max_tasks]
            break
    result.matched = len(ids)
    if progress is not None:
        progress(result)
    act = BULK_ACTIONS[action]
    for start in range(0, len(ids), batch):
        for task_id in ids[start : start + batch]:
            try:
                act(inspector, task_id)
                result.done += 1
            except (ConveyorError, ValueError) as exc:
                result.failed += 1
                result.why = result.why or str(exc)
        result.batches += 1
        if progress is not None:
            progress(result)
    return result


def parse_states(values: Sequence[str]) -> tuple[TaskState, ...]:
    """States from their names (ValueError naming the known ones)."""
    known = {s.value: s for s in TaskState}
    for value in values:
        if value not in known:
            raise ValueError(f"unknown state {value!r}; one of: {', '.join(known)}")
    return tuple(known[v] for v in values)


def call_text(args: Sequence[object], kwargs: dict[str, object]) -> str:
    """A call's arguments in one line as the dashboard shows them: ``1, "x", width=640`` (JSON values)."""
    parts = [json.dumps(a, ensure_ascii=False, default=str) for a in args]
    parts += [f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in kwargs.items()]
    return ", ".join(parts)
