"""``doctor``: check the broker and report each check as OK, WARN or FAIL.

Backend-specific checks come from the optional ``ChecksServer`` capability: one row per ``Finding`` of
the broker's ``preflight()`` (Redis: eviction policy, persistence; SQLite: journal mode, schema
version), the same ones a starting worker logs when they are not ok. On a Redis Cluster these come
first as one row for the cluster and one per master (its address, slot ranges, replicas and their
link; WARN without a live replica), then the server checks of every master, each row naming it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from conveyor.brokers.base import ChecksServer
from conveyor.cli.output import emit, json_option, redact
from conveyor.cli.state import CliState, pass_state
from conveyor.errors import ConveyorError
from conveyor.model import QueueInfo, TaskState, WorkerInfo
from conveyor.names import similar_name

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Check", "doctor", "run_checks"]

_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "OK" | "WARN" | "FAIL"
    detail: str


def run_checks(state: CliState) -> list[Check]:
    """Every check that applies to the configured broker; stops after a failed connection."""
    checks: list[Check] = []
    try:
        app = state.conveyor()
        started = time.perf_counter()
        queues = app.inspect.queues()
        elapsed = (time.perf_counter() - started) * 1000
    except (ConveyorError, OSError, ValueError) as exc:
        return [Check("broker", "FAIL", f"{redact(state.resolved_url)}: {exc}")]
    checks.append(Check("broker", "OK", f"{type(app.broker).__name__} reachable in {elapsed:.1f} ms"))
    broker = app.broker
    if isinstance(broker, ChecksServer):
        try:
            checks += [
                Check(f.name, "OK" if f.ok else "FAIL" if f.failing else "WARN", f.detail) for f in broker.preflight()
            ]
        except ConveyorError as exc:
            checks.append(Check("preflight", "FAIL", str(exc)))
    workers = app.inspect.workers()
    checks.append(
        Check("workers", "OK", f"{len(workers)} live") if workers else Check("workers", "WARN", "no live worker")
    )
    checks.extend(_unserved_check(queues, workers))
    checks.extend(_undeclared_check(app, queues))
    paused = [q.name for q in queues if q.settings.paused]
    if paused:
        checks.append(Check("paused queues", "WARN", ", ".join(paused)))
    now = app.now()
    stale = [q.name for q in queues if q.oldest_pending_at is not None and now - q.oldest_pending_at > 300]
    if stale:
        checks.append(Check("backlog", "WARN", "tasks waiting > 5 min in: " + ", ".join(stale)))
    return checks


def _unserved_check(queues: list[QueueInfo], workers: list[WorkerInfo]) -> list[Check]:
    """Queues with tasks waiting to run that no live worker serves: a worker started without ``-Q``
    serves ``default`` alone, whatever queues the app's tasks name. (With no live worker at all the
    workers check says so already.)"""
    if not workers:
        return []
    served = {queue for worker in workers for queue in worker.queues}
    states = (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRY)
    waiting = {
        queue.name: sum(queue.counts.get(state, 0) for state in states)
        for queue in queues
        if queue.name not in served and not queue.settings.paused
    }
    unserved = [f"{name} ({count} waiting)" for name, count in sorted(waiting.items()) if count]
    return [] if not unserved else [Check("unserved queues", "WARN", "no live worker serves: " + ", ".join(unserved))]


#: Tasks per queue and waiting state that ``doctor`` reads to find undeclared task names.
_SAMPLE = 500


def _undeclared_check(app: Conveyor, queues: list[QueueInfo]) -> list[Check]:
    """Waiting tasks whose name no worker ever declared: nothing may ever run them (a typo, a worker
    not deployed). Samples the first tasks of each waiting state of each queue: a count from a sample
    that left some unread says "at least"."""
    if not app.declared.supported:
        return []
    declared = app.declared.all()
    waiting: dict[tuple[str, str], int] = {}
    sampled: set[tuple[str, str]] = set()  # counted in a sample that left tasks of their state unread
    for queue in queues:
        for state in (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRY):
            if not (total := queue.counts.get(state, 0)):
                continue
            for record in app.broker.list_tasks(queue.name, state, app.now(), limit=_SAMPLE):
                if record.name not in declared and app.handler(record.name) is None:
                    waiting[(record.name, queue.name)] = waiting.get((record.name, queue.name), 0) + 1
                    if total > _SAMPLE:
                        sampled.add((record.name, queue.name))
    if not waiting:
        return [Check("task declarations", "OK", f"{len(declared)} task(s) declared by workers")]

    def described(name: str, queue: str, count: int) -> str:
        meant = similar_name(name, declared)
        counted = f"at least {count}" if (name, queue) in sampled else str(count)
        return f"{name} ({counted} in {queue}" + ("" if meant is None else f"; did you mean {meant!r}?") + ")"

    found = ", ".join(described(name, queue, count) for (name, queue), count in sorted(waiting.items()))
    return [Check("undeclared tasks", "WARN", f"no worker ever declared: {found}")]


@click.command()
@json_option
@pass_state
def doctor(state: CliState) -> None:
    """Check the broker: reachability, and each backend's settings. Exits 1 on any FAIL."""
    checks = run_checks(state)

    def render(c: Console) -> None:
        table = Table(title=f"conveyor doctor · {redact(state.resolved_url)}", title_justify="left")
        for column in ("check", "status", "detail"):
            table.add_column(column)
        for check in checks:
            table.add_row(check.name, Text(check.status, style=_STYLE.get(check.status, "")), check.detail)
        c.print(table)

    emit(state.json, checks, render)
    if any(check.status == "FAIL" for check in checks):
        raise SystemExit(1)
