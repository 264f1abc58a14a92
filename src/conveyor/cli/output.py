"""Output shared by every command: a rich table on a terminal, JSON with ``--json``."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from conveyor._validate import check_queue
from conveyor.model import QueueInfo, TaskInfo, TaskState, WorkerInfo
from conveyor.urls import redact

__all__ = [
    "QUEUE",
    "STATES",
    "checked",
    "console",
    "emit",
    "format_age",
    "format_time",
    "json_option",
    "queue_table",
    "redact",
    "short",
    "to_jsonable",
]

STATES = [state.value for state in TaskState]


class QueueName(click.ParamType[str]):
    """A queue name as ``check_queue`` takes it: a name no queue can have is a usage error (exit 2)
    in every command, as a malformed option is, before anything is read or written."""

    name = "queue"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_queue(value)
        except (TypeError, ValueError) as exc:
            self.fail(str(exc), param, ctx)


#: The type of every queue argument and option.
QUEUE = QueueName()


def checked(check: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option's callback: the value as ``check`` takes it, a usage error (exit 2) if it refuses it."""

    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return check(value)
        except (TypeError, ValueError) as exc:
            raise click.BadParameter(str(exc)) from None

    return convert


def console(stderr: bool = False) -> Console:
    """A console on the current stdout (looked up at call time, so click's test runner captures it).
    Text is printed as it is: no Rich markup nor emoji codes, since what the CLI prints is mostly the
    tasks' own text (arguments, results, errors), in which ``[/]`` or ``:smile:`` must stay as written;
    a style is given as ``style=``."""
    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() else 160  # piped: don't squeeze tables into 80 columns
    return Console(file=stream, highlight=False, soft_wrap=False, width=wide, markup=False, emoji=False)


def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` on a command: print machine-readable JSON instead of a table."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        from conveyor.cli.state import CliState

        if value:
            ctx.ensure_object(CliState).json = True
        return value

    return click.option(
        "--json", "as_json", is_flag=True, expose_value=False, callback=remember, help="Print JSON instead of a table."
    )(command)


def to_jsonable(value: Any) -> Any:
    """Dataclasses (TaskInfo, QueueInfo, ...) as plain dicts; enums as their values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, QueueInfo):
            data = {"name": value.name, **data}
        if isinstance(value, TaskInfo):
            # Scripts read "completed_at" before it was renamed; keep the key for one release.
            data["completed_at"] = data["finished_at"]
        return data
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def emit(as_json: bool, data: Any, render: Callable[[Console], None]) -> None:
    """Print ``data`` as JSON, or call ``render`` with a console."""
    if as_json:
        click.echo(json.dumps(to_jsonable(data), indent=2, sort_keys=False, default=str))
    else:
        render(console())


def format_time(ts: float | None, now: float | None = None) -> str:
    """``2024-05-01 12:00:03Z (3s ago)``; ``-`` for None."""
    if ts is None:
        return "-"
    try:
        text = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):  # past what a date shows (stored by an older version)
        return f"epoch {ts!r}"
    if now is not None:
        delta = ts - now
        text += f" ({'in ' + format_age(delta) if delta > 0 else format_age(-delta) + ' ago'})"
    return text


def format_age(seconds: float) -> str:
    """A short duration: ``45s``, ``3m12s``, ``2h05m``, ``4d03h``."""
    s = int(seconds)
    if s < 60:
        return f"{max(seconds, 0):.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def short(text: str | None, width: int = 60) -> str:
    if text is None:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def queue_table(queues: Iterable[QueueInfo], now: float) -> Table:
    """Queues by states, with the paused flag and the oldest pending task's age; a ``partitions``
    column too when some queue has several."""
    queues = list(queues)
    parts = any(info.settings.partitions > 1 for info in queues)
    table = Table(title="Queues", title_justify="left")
    table.add_column("queue", style="bold")
    for state in STATES:
        table.add_column(state, justify="right")
    table.add_column("total", justify="right", style="bold")
    table.add_column("paused")
    table.add_column("oldest pending", justify="right")
    if parts:
        table.add_column("partitions", justify="right")
    for info in queues:
        oldest = format_age(now - info.oldest_pending_at) if info.oldest_pending_at is not None else "-"
        counts = [str(info.counts.get(state, 0)) for state in STATES]
        paused = "yes" if info.settings.paused else ""
        row = [info.name, *counts, str(info.counts.get("total", 0)), paused, oldest]
        table.add_row(*row, *([str(info.settings.partitions)] if parts else []))
    return table


def task_row(info: TaskInfo, now: float) -> list[str]:
    when = info.finished_at if info.finished_at is not None else info.next_run_at
    return [
        info.id,
        info.name,
        info.state.value,
        str(info.attempts),
        str(info.priority),
        format_time(when, now) if when is not None else format_time(info.enqueued_at, now),
        _undecodable(info) + short(info.last_error, 50),
    ]


def _undecodable(info: TaskInfo) -> str:
    """A marker for a row whose stored payload or options no longer decode (``show`` gives the reason)."""
    if info.payload_error is not None:
        return "undecodable payload · "
    return "undecodable options · " if info.options_error is not None else ""


def worker_table(workers: Iterable[WorkerInfo], now: float) -> Table:
    table = Table(title="Workers", title_justify="left")
    for name in ("id", "host", "pid", "queues", "concurrency", "heartbeat", "running", "processed", "failed"):
        table.add_column(name)
    for w in workers:
        table.add_row(
            w.id,
            w.host,
            str(w.pid),
            ",".join(w.queues),
            str(w.concurrency),
            format_age(now - w.last_seen) + " ago",
            str(len(w.running)),
            str(w.processed),
            str(w.failed),
        )
    return table
