"""Queue commands: ``stats`` (``--watch``), ``pause`` / ``resume``, ``purge``, ``queues configure``
and ``queues delete``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from conveyor._validate import MOST_COUNT, check_aging, check_int
from conveyor.cli.output import QUEUE, STATES, checked, console, emit, json_option, queue_table, worker_table
from conveyor.cli.state import CliState, pass_state
from conveyor.errors import ConveyorError, QueueNotFound
from conveyor.model import MAX_PARTITIONS, QueueSettings

__all__ = ["pause", "purge", "queues", "resume", "stats"]

#: The shortest refresh ``stats --watch`` accepts: each one reads every queue's counts from the broker.
MIN_INTERVAL = 0.1


@click.command()
@click.option("--watch", "-w", is_flag=True, help="Refresh live until interrupted (Ctrl-C).")
@click.option(
    "--interval",
    type=click.FloatRange(min=MIN_INTERVAL),
    default=2.0,
    show_default=True,
    help=f"Seconds per refresh (at least {MIN_INTERVAL}).",
)
@click.option("--iterations", type=click.IntRange(min=1), hidden=True, help="Stop watching after N refreshes.")
@json_option
@pass_state
def stats(state: CliState, watch: bool, interval: float, iterations: int | None) -> None:
    """Task counts per queue and state, and the live workers."""
    inspector = state.conveyor().inspect
    if not watch:
        queues, workers, now = inspector.queues(), inspector.workers(), inspector.app.now()

        def render(c: Console) -> None:
            c.print(queue_table(queues, now) if queues else "no queues yet")
            if workers:
                c.print(worker_table(workers, now))

        emit(state.json, {"queues": queues, "workers": workers}, render)
        return
    if state.json:
        raise click.UsageError("--watch draws a live table; it cannot be combined with --json")

    def snapshot() -> Group:
        now = inspector.app.now()
        return Group(queue_table(inspector.queues(), now), worker_table(inspector.workers(), now))

    shown = 0
    try:
        with Live(snapshot(), console=console(), auto_refresh=False) as live:
            while iterations is None or shown < iterations:
                live.update(snapshot(), refresh=True)
                shown += 1
                if iterations is not None and shown >= iterations:
                    break
                time.sleep(interval)
    except KeyboardInterrupt:
        pass


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--create", is_flag=True, help="Pause QUEUE even if it has no task yet (ahead of its first).")
@json_option
@pass_state
def pause(state: CliState, queue: str, create: bool) -> None:
    """Pause QUEUE: workers stop claiming from it (enqueueing goes on)."""
    inspector = state.conveyor(create=create).inspect  # --create: ahead of its first task, on a new file too
    if not create:
        inspector.queue(queue)  # QueueNotFound: a typo must not make a new, paused queue
    inspector.pause(queue)
    emit(state.json, {"queue": queue, "paused": True}, lambda c: c.print(f"paused {queue}"))


@click.command()
@click.argument("queue", type=QUEUE)
@json_option
@pass_state
def resume(state: CliState, queue: str) -> None:
    """Resume a paused QUEUE."""
    inspector = state.conveyor().inspect
    inspector.queue(queue)  # QueueNotFound rather than a new queue
    inspector.resume(queue)
    emit(state.json, {"queue": queue, "paused": False}, lambda c: c.print(f"resumed {queue}"))


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--state", "-s", "task_state", type=click.Choice([s for s in STATES if s != "active"]), required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--chunk", type=click.IntRange(min=1), default=1000, show_default=True, help="Tasks deleted per call.")
@json_option
@pass_state
def purge(state: CliState, queue: str, task_state: str, yes: bool, chunk: int) -> None:
    """Delete every task of QUEUE in one state, in chunks (progress bar on a terminal)."""
    inspector = state.conveyor().inspect
    total = inspector.queue(queue).counts.get(task_state, 0)  # QueueNotFound: a typo is not "deleted 0"
    if not yes:
        click.confirm(f"Delete {total} {task_state} task(s) of queue {queue!r}?", abort=True, err=True)
    deleted = 0
    columns = (TextColumn("purge"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    err = console(stderr=True)
    with Progress(*columns, console=err, transient=True, disable=total <= chunk or not err.is_terminal) as progress:
        bar = progress.add_task("purge", total=total)
        while True:
            done = inspector.purge(queue, task_state, limit=chunk)
            deleted += done
            progress.update(bar, completed=min(deleted, total))
            if done < chunk:
                break
    emit(
        state.json,
        {"queue": queue, "state": task_state, "deleted": deleted},
        lambda c: c.print(f"deleted {deleted} {task_state} task(s) from {queue}"),
    )


@click.group()
def queues() -> None:
    """Manage queues themselves (`conveyor stats` lists them)."""


@queues.command("delete")
@click.argument("queue", type=QUEUE)
@json_option
@pass_state
def delete_queue(state: CliState, queue: str) -> None:
    """Forget an empty QUEUE (its settings too); purge its tasks first."""
    state.conveyor().inspect.delete_queue(queue)
    emit(state.json, {"queue": queue, "deleted": True}, lambda c: c.print(f"deleted queue {queue}"))


def _or_none(
    kind: type[int] | type[float], check: Callable[[Any], object]
) -> Callable[[click.Context, click.Parameter, str | None], object]:
    """An option's callback: a number ``check`` takes (as ``configure_queue`` checks it: else a usage
    error), ``none`` to lift the setting (``_NONE``), or None when not given."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
        if value is None:
            return None
        if value.strip().lower() == "none":
            return _NONE
        try:
            number = kind(value)
        except ValueError:
            raise click.BadParameter(
                f"{value!r} is not {'an integer' if kind is int else 'a number'} or 'none'"
            ) from None
        checked(check)(ctx, param, number)
        return number

    return convert


N = TypeVar("N", int, float)

#: ``none`` given for a setting: lift it (None alone means "not given").
_NONE = object()


@queues.command("configure")
@click.argument("queue", type=QUEUE)
@click.option(
    "--max-size",
    callback=_or_none(int, lambda n: check_int("max_size", n, maximum=MOST_COUNT)),
    metavar="N|none",
    help="Most unfinished tasks the queue holds.",
)
@click.option(
    "--concurrency",
    callback=_or_none(int, lambda n: check_int("concurrency", n, minimum=1, maximum=MOST_COUNT)),
    metavar="N|none",
    help="Most tasks running at once.",
)
@click.option(
    "--aging",
    callback=_or_none(float, check_aging),
    metavar="S|none",
    help="Waiting seconds per priority step.",
)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), help="Parts the queue is spread over.")
@click.option("--create", is_flag=True, help="Configure QUEUE even if it has no task yet (ahead of its first).")
@json_option
@pass_state
def configure_queue(
    state: CliState,
    queue: str,
    max_size: object,
    concurrency: object,
    aging: object,
    partitions: int | None,
    create: bool,
) -> None:
    """Show QUEUE's settings, or change those given (the others are kept, and a paused queue stays
    paused). Every process sees them at once; changing --partitions loses and strands no task."""
    changing = any(value is not None for value in (max_size, concurrency, aging, partitions))
    app = state.conveyor(create=create)  # --create: a queue ahead of its first task, on a new file too
    try:
        current = app.inspect.queue(queue).settings
    except QueueNotFound:
        if not create:
            raise  # a typo must not make a new queue
        current = QueueSettings(queue)
        changing = True  # created with the settings given, the others at their defaults
    settings = current
    if changing:
        try:
            app.configure_queue(
                queue,
                max_size=_pick(max_size, current.max_size, int),
                concurrency=_pick(concurrency, current.concurrency, int),
                aging=_pick(aging, current.aging, float),
                partitions=current.partitions if partitions is None else partitions,
            )
        except (ConveyorError, TypeError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        settings = app.inspect.queue(queue).settings

    def render(c: Console) -> None:
        shown = {
            "max_size": settings.max_size,
            "concurrency": settings.concurrency,
            "aging": settings.aging,
            "partitions": settings.partitions,
            "paused": settings.paused,
        }
        text = ", ".join(f"{key} {'none' if value is None else value}" for key, value in shown.items())
        c.print(f"{'configured' if changing else 'queue'} {queue}: {text}")

    emit(state.json, settings, render)


def _pick(given: object, current: N | None, kind: type[N]) -> N | None:
    """A setting's new value: ``current`` when not given, None for ``none``, else the number given."""
    if given is None:
        return current
    if given is _NONE:
        return None
    assert isinstance(given, kind)  # (what _or_none(kind) made of the option)
    return given
