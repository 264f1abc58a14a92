"""``doctor``: check the broker and report each check as OK, WARN or FAIL.

Backend-specific checks use optional broker capabilities (the Broker protocol does not require them):
``preflight()`` (``ChecksServer``; Redis: eviction policy, persistence, the same warnings a starting
worker logs), and ``journal_mode`` and ``schema_version`` (SQLite, found with ``getattr``), as
attributes or zero-argument methods.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from conveyor.brokers.base import ChecksServer
from conveyor.cli.output import emit, json_option, redact
from conveyor.cli.state import CliState, pass_state
from conveyor.errors import ConveyorError
from conveyor.model import QueueInfo, TaskState

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Check", "doctor", "run_checks"]

_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "OK" | "WARN" | "FAIL"
    detail: str


def _capability(broker: object, name: str) -> tuple[bool, Any]:
    """(present, value) of an optional attribute or zero-argument method."""
    value = getattr(broker, name, None)
    if value is None:
        return False, None
    return True, value() if callable(value) else value


def _preflight_checks(report: Any) -> Iterable[Check]:
    """Normalise whatever ``preflight()`` returns: Check-like objects, (name, status, detail) tuples,
    a mapping of name → problem, or a list of warning strings (each a WARN)."""
    if report is None:
        return
    if isinstance(report, dict):
        items: Iterable[Any] = [(k, v) for k, v in report.items()]
    elif isinstance(report, (list, tuple)):
        items = report
    else:
        items = [report]
    for item in items:
        if isinstance(item, str):
            yield Check("preflight", "WARN", item)
        elif isinstance(item, tuple) and len(item) == 3:
            yield Check(str(item[0]), str(item[1]).upper(), str(item[2]))
        elif isinstance(item, tuple) and len(item) == 2:
            ok = item[1] in (None, True, "", "ok", "OK")
            yield Check(str(item[0]), "OK" if ok else "WARN", "" if ok else str(item[1]))
        elif hasattr(item, "status") and hasattr(item, "name"):
            status = str(item.status).upper()
            yield Check(str(item.name), status if status in _STYLE else "WARN", str(getattr(item, "detail", "")))
        else:
            yield Check("preflight", "WARN", str(item))


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
    for name, wanted in (("journal_mode", "wal"),):
        present, value = _capability(broker, name)
        if present:
            ok = str(value).lower() == wanted
            checks.append(Check(name, "OK" if ok else "WARN", f"{value}" + ("" if ok else f" (expected {wanted})")))
    present, version = _capability(broker, "schema_version")
    if present:
        checks.append(Check("schema_version", "OK", str(version)))
    if isinstance(broker, ChecksServer):
        try:
            checks.extend(_preflight_checks(broker.preflight()))
        except ConveyorError as exc:
            checks.append(Check("preflight", "FAIL", str(exc)))
    workers = app.inspect.workers()
    checks.append(
        Check("workers", "OK", f"{len(workers)} live") if workers else Check("workers", "WARN", "no live worker")
    )
    checks.extend(_undeclared_check(app, queues))
    paused = [q.name for q in queues if q.settings.paused]
    if paused:
        checks.append(Check("paused queues", "WARN", ", ".join(paused)))
    now = app.now()
    stale = [q.name for q in queues if q.oldest_pending_at is not None and now - q.oldest_pending_at > 300]
    if stale:
        checks.append(Check("backlog", "WARN", "tasks waiting > 5 min in: " + ", ".join(stale)))
    return checks


#: Tasks per queue and waiting state that ``doctor`` reads to find undeclared task names.
_SAMPLE = 500


def _undeclared_check(app: Conveyor, queues: list[QueueInfo]) -> list[Check]:
    """Waiting tasks whose name no worker ever declared: nothing may ever run them (a typo, a worker
    not deployed). Samples the first tasks of each waiting state of each queue."""
    if not app.declared.supported:
        return []
    declared = app.declared.all()
    waiting: dict[tuple[str, str], int] = {}
    for queue in queues:
        for state in (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRY):
            if not queue.counts.get(state, 0):
                continue
            for record in app.broker.list_tasks(queue.name, state, app.now(), limit=_SAMPLE):
                if record.name not in declared and app.handler(record.name) is None:
                    waiting[(record.name, queue.name)] = waiting.get((record.name, queue.name), 0) + 1
    if not waiting:
        return [Check("task declarations", "OK", f"{len(declared)} task(s) declared by workers")]
    found = ", ".join(f"{name} ({count} in {queue})" for (name, queue), count in sorted(waiting.items()))
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
            table.add_row(check.name, f"[{_STYLE.get(check.status, '')}]{check.status}[/]", check.detail)
        c.print(table)

    emit(state.json, checks, render)
    if any(check.status == "FAIL" for check in checks):
        raise SystemExit(1)
