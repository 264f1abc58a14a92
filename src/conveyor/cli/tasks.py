"""Task commands: ``enqueue``, ``ls``, ``show``, and the actions ``run-now / archive / delete / cancel ID...``
(``run-now`` and ``delete`` also ``--all`` tasks a filter keeps: ``bulk.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, BinaryIO

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table

from conveyor._validate import check_priority, check_seconds, check_task_id, check_task_name
from conveyor.app import Conveyor
from conveyor.cli.bulk import Bulk, bulk_options, run_bulk
from conveyor.cli.output import QUEUE, STATES, checked, emit, format_time, json_option, short, task_row, to_jsonable
from conveyor.cli.state import CliState, pass_state
from conveyor.errors import ConveyorError
from conveyor.inspect import Inspector
from conveyor.model import TaskInfo
from conveyor.names import did_you_mean

__all__ = ["archive", "cancel", "delete", "enqueue", "ls", "run_now", "show"]


def _json_arg(text: str | None, what: str, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg} at column {exc.colno})", param_hint=what) from None
    if not isinstance(value, kind):
        raise click.BadParameter(f"must be a JSON {'array' if kind is list else 'object'}", param_hint=what)
    return value


@click.command()
@click.argument("name", callback=checked(check_task_name))
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments as a JSON array, e.g. '[1, \"a\"]'.")
@click.option(
    "--kwargs", "kwargs_json", metavar="JSON", help='Keyword arguments as a JSON object, e.g. \'{"to": "x"}\'.'
)
@click.option(
    "--delay",
    type=float,
    callback=checked(lambda s: check_seconds("delay", s)),
    help="Run no sooner than this many seconds from now.",
)
@click.option(
    "--priority", type=int, callback=checked(check_priority), help="Higher runs first (default: the task's priority)."
)
@click.option("--queue", type=QUEUE, help="Queue name (default: the task's queue, else 'default').")
@click.option("--task-id", callback=checked(check_task_id), help="Explicit task id (a duplicate id is refused).")
@click.option(
    "--file",
    "calls_file",
    type=click.File("rb"),
    help='Enqueue many calls: JSON lines, each {"args": [...], "kwargs": {...}} (\'-\' for stdin).',
)
@json_option
@pass_state
def enqueue(
    state: CliState,
    name: str,
    args_json: str | None,
    kwargs_json: str | None,
    delay: float | None,
    priority: int | None,
    queue: str | None,
    task_id: str | None,
    calls_file: BinaryIO | None,
) -> None:
    """Enqueue task NAME (the handler need not be importable here: its queue, priority, expiry and uniqueness are
    the ones a worker serving it declared)."""
    options: dict[str, Any] = {"delay": delay, "priority": priority, "queue": queue, "task_id": task_id}
    options = {key: value for key, value in options.items() if value is not None}
    app = state.conveyor(create=True)
    if calls_file is not None:
        if args_json is not None or kwargs_json is not None:
            raise click.UsageError("give --file or --args/--kwargs, not both")
        ids = _enqueue_file(state, name, calls_file, options)
        _warn_if_undeclared(app, name, queue)
        emit(state.json, {"enqueued": len(ids), "ids": ids}, lambda c: c.print(f"enqueued {len(ids)} {name} tasks"))
        return
    handle = app.enqueue(
        name, _json_arg(args_json, "--args", list), _json_arg(kwargs_json, "--kwargs", dict), **options
    )
    _warn_if_undeclared(app, name, queue)
    info = handle.status()
    emit(state.json, info, lambda c: c.print(f"enqueued {info.id} ({info.name}, queue {info.queue}, {info.state})"))


def _warn_if_undeclared(app: Conveyor, name: str, queue: str | None) -> None:
    """A name no worker ever declared is most often a typo, or a worker not started yet: say so."""
    if app.handler(name) is None and app.declared.supported and app.declaration(name) is None:
        where = queue or "default"
        hint = did_you_mean(name, app.declared.all())
        click.echo(
            f"warning: no worker has declared task {name!r}{hint}; it goes to queue {where!r} with default options",
            err=True,
        )


#: What a line of ``enqueue --file`` may hold.
_LINE_KEYS = ("args", "kwargs")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _calls(lines: BinaryIO) -> list[tuple[list[Any], dict[str, Any]]]:
    """Every line's call, each checked as the enqueue will (strict JSON, known keys) before any is
    stored: a file is enqueued whole or not at all, and a refusal names its line (read as bytes and
    decoded line by line, so that a line that is not UTF-8 is the one named)."""
    calls: list[tuple[list[Any], dict[str, Any]]] = []
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise click.ClickException(f"line {number}: not UTF-8 text ({exc.reason})") from None
        if not line.strip():
            continue
        try:
            call = json.loads(line, parse_constant=_not_json)
        except ValueError as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise click.ClickException(f"line {number}: not valid JSON ({why})") from None
        if not isinstance(call, dict) or not isinstance(call.get("args", []), list):
            raise click.ClickException(f'line {number}: expected {{"args": [...], "kwargs": {{...}}}}')
        unknown = sorted(set(call) - set(_LINE_KEYS))
        if unknown:
            raise click.ClickException(
                f"line {number}: unknown key(s) {', '.join(map(repr, unknown))}; a line holds"
                ' "args" and "kwargs" (options such as --queue apply to the whole file)'
            )
        kwargs = call.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise click.ClickException(f"line {number}: kwargs must be a JSON object")
        calls.append((call.get("args", []), kwargs))
    return calls


def _enqueue_file(state: CliState, name: str, lines: BinaryIO, options: dict[str, Any]) -> list[str]:
    """Every line's call in one ``enqueue_many``: refused whole (``QueueFull``, a bad call) where the
    broker stores a call at once (memory, SQLite); Redis stores 500 a call (README, "Queues")."""
    app = state.conveyor(create=True)
    calls = _calls(lines)
    return [h.id for h in app.enqueue_many(name, calls, **options)] if calls else []


@click.command("ls")
@click.option("--queue", "-q", type=QUEUE, default="default", show_default=True, help="Queue to list.")
@click.option("--state", "-s", "task_state", type=click.Choice(STATES), default="pending", show_default=True)
@click.option("--limit", "-n", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@json_option
@pass_state
def ls(state: CliState, queue: str, task_state: str, limit: int, offset: int) -> None:
    """List a page of tasks of one queue in one state."""
    app = state.conveyor()
    known = next((q for q in app.inspect.queues() if q.name == queue), None)
    if known is None and click.get_current_context().get_parameter_source("queue") is not ParameterSource.DEFAULT:
        app.inspect.queue(queue)  # QueueNotFound naming the known ones: a typo is not "no tasks"
    infos = app.inspect.list(queue, task_state, offset=offset, limit=limit)
    total = known.counts.get(task_state, 0) if known is not None else 0
    now = app.now()

    def render(c: Console) -> None:
        if not infos:
            past = f" at offset {offset} (there are {total})" if total else ""
            c.print(f"no {task_state} tasks in queue {queue!r}{past}")
            return
        last = offset + len(infos)
        table = Table(title=f"{queue} · {task_state} · {offset + 1}-{last} of {total}", title_justify="left")
        for column in ("id", "name", "state", "attempts", "priority", "when", "last error"):
            table.add_column(column, no_wrap=column == "id")
        for info in infos:
            table.add_row(*task_row(info, now))
        c.print(table)
        if last < total:
            c.print(f"more: --offset {last}")

    emit(state.json, infos, render)


@click.command()
@click.argument("task_id")
@json_option
@pass_state
def show(state: CliState, task_id: str) -> None:
    """Show every field of a task, its error history, its latest failure's traceback and its timeline."""
    app = state.conveyor()
    info = app.inspect.get(task_id)
    timeline = Inspector.timeline(info)
    data = {**to_jsonable(info), "timeline": to_jsonable(timeline)}
    emit(state.json, data, lambda c: _render_task(c, info, app.now()))


def _render_task(c: Console, info: TaskInfo, now: float) -> None:
    fields = Table(title=f"Task {info.id}", title_justify="left", show_header=False)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    times = {"next_run_at", "enqueued_at", "started_at", "finished_at", "expires_at", "keep_until", "lease_expires_at"}
    for key, value in to_jsonable(info).items():
        if key in ("errors", "traceback", "completed_at"):  # sections of their own, below; a JSON-only alias
            continue
        if key in times:
            text = format_time(value, now)
        elif value is None and key in ("max_retries", "retries_left"):
            text = "unknown (no worker has reported the task's retry limit yet)"
        elif isinstance(value, (dict, list)) or key == "result":
            text = json.dumps(value, default=str)
        else:
            text = "-" if value is None else str(value)
        fields.add_row(key, text)
    c.print(fields)
    if info.errors:
        errors = Table(title="Error history", title_justify="left")
        for column in ("attempt", "at", "error"):
            errors.add_column(column, overflow="fold")
        for entry in info.errors:
            errors.add_row(str(entry.attempt), format_time(entry.at, now), entry.error)
        c.print(errors)
    if info.traceback is not None:
        c.print("Traceback of the latest failure", style="bold")
        c.print(info.traceback.rstrip("\n"), soft_wrap=True)
    timeline = Table(title="Timeline", title_justify="left")
    for column in ("at", "event", "detail"):
        timeline.add_column(column, overflow="fold")
    for item in Inspector.timeline(info):
        timeline.add_row(format_time(item.at, now), item.event, short(item.detail, 100))
    c.print(timeline)


def _act(state: CliState, verb: str, ids: tuple[str, ...], action: Callable[[Inspector, str], Any]) -> None:
    """Apply ``action`` to each id; report each; exit 1 if any failed."""
    inspector = state.conveyor().inspect
    results: list[dict[str, Any]] = []
    for task_id in ids:
        try:
            outcome = action(inspector, task_id)
        except (ConveyorError, ValueError, TypeError) as exc:
            results.append({"id": task_id, "ok": False, "error": str(exc)})
        else:
            results.append({"id": task_id, "ok": True, **({"state": str(outcome)} if outcome is not None else {})})

    def render(c: Console) -> None:
        for result in results:
            if result["ok"]:
                suffix = f" (now {result['state']})" if "state" in result else ""
                c.print(f"{verb} {result['id']}{suffix}")

    emit(state.json, results, render)
    failures = [r for r in results if not r["ok"]]
    if failures:
        if not state.json:
            for failure in failures:
                error, task_id = failure["error"], failure["id"]
                # most errors already name the task ("task not found: 'x'"): don't say it twice
                click.echo(f"Error: {error}" if repr(task_id) in error else f"Error: {task_id}: {error}", err=True)
        raise SystemExit(1)


def _action_command(name: str, verb: str, help_text: str, action: Callable[[Inspector, str], Any]) -> click.Command:
    @click.command(name, help=help_text)
    @click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
    @json_option
    @pass_state
    def command(state: CliState, task_ids: tuple[str, ...]) -> None:
        _act(state, verb, task_ids, action)

    return command


def _bulk_command(
    name: str,
    verb: str,
    help_text: str,
    action: Callable[[Inspector, str], Any],
    bulk: tuple[str, str, tuple[str, ...]],
) -> click.Command:
    """An action command that takes IDs, or ``--all`` and filters (``bulk``: the bulk action's key in
    ``selection.BULK_ACTIONS``, the confirmation's verb, the states it may select)."""
    key, ask, states = bulk
    default = tuple(s for s in ("retry", "archived") if s in states)

    @click.command(name, help=help_text)
    @click.argument("task_ids", metavar="[ID...]", nargs=-1)
    @bulk_options(states, default)
    @json_option
    @pass_state
    def command(state: CliState, /, task_ids: tuple[str, ...], **filters: Any) -> None:
        selection = Bulk(default, filters)
        if selection.selected == bool(task_ids):
            raise click.UsageError(
                "give task IDs, or --all (with options to narrow it), not both"
                if task_ids
                else "give task IDs, or --all"
            )
        if selection.selected:
            run_bulk(state, selection, key, verb, ask)
        else:
            _act(state, verb, task_ids, action)

    return command


run_now = _bulk_command(
    "run-now",
    "queued",
    "Make scheduled, retry or archived tasks pending now: IDs, or --all (default: every retry and archived task).",
    lambda i, t: i.run_now(t),
    ("retry", "Run now", ("scheduled", "retry", "archived")),
)
archive = _action_command(
    "archive", "archived", "Archive waiting tasks (scheduled, pending, retry).", lambda i, t: i.archive(t)
)
delete = _bulk_command(
    "delete",
    "deleted",
    "Delete tasks (any state but active): IDs, or --all (default: every retry and archived task).",
    lambda i, t: i.delete(t),
    ("delete", "Delete", ("scheduled", "pending", "retry", "completed", "archived")),
)
cancel = _action_command(
    "cancel", "cancelled", "Cancel unfinished tasks, running ones too (archived cancelled).", lambda i, t: i.cancel(t)
)
