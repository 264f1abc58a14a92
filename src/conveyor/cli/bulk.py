"""``run-now --all`` and ``delete --all``: one action over every task a filter keeps, from a terminal, as
the dashboard's "retry / delete all matching" does (``conveyor.selection``) and asynq's ``task runall``.

The ids are gathered first, then acted on in batches; the confirmation names how many matched before
anything changes. A task that changed meanwhile (started, retried or deleted by someone else) is
counted as not changed, and the command exits 1 saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from conveyor.cli.output import QUEUE, console, emit
from conveyor.cli.state import CliState
from conveyor.model import ArchiveReason, TaskState
from conveyor.selection import BulkResult, TaskFilter, apply_all

__all__ = ["Bulk", "bulk_options", "run_bulk"]

F = TypeVar("F", bound=Callable[..., Any])

#: The options of ``bulk_options`` that narrow ``--all``: their keyword argument and their flag.
NARROWING = {"queues": "--queue", "states": "--state", "name": "--name", "reason": "--reason", "error": "--error"}


def bulk_options(states: Sequence[str], default: Sequence[str]) -> Callable[[F], F]:
    """The ``--all`` flag and its filters, for a command whose tasks may be in ``states``."""
    options = (
        click.option(
            "--all", "select_all", is_flag=True, help="Act on every task the options below keep, instead of IDs."
        ),
        click.option(
            "-q",
            "--queue",
            "queues",
            type=QUEUE,
            multiple=True,
            help="Only tasks of QUEUE (repeatable; default: every queue).",
        ),
        click.option(
            "-s",
            "--state",
            "states",
            multiple=True,
            type=click.Choice(states),
            help=f"Only tasks in this state (repeatable; default: {' and '.join(default)}).",
        ),
        click.option("--name", metavar="TEXT", help="Only tasks whose name contains TEXT."),
        click.option("--reason", type=click.Choice([r.value for r in ArchiveReason]), help="Only archived so."),
        click.option("--error", metavar="TEXT", help="Only tasks whose last error contains TEXT."),
        click.option("-y", "--yes", is_flag=True, help="With --all: do not ask for confirmation."),
    )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


class Bulk:
    """What ``bulk_options`` parsed: whether ``--all`` was given, and the filter its options make."""

    def __init__(self, default: Sequence[str], values: dict[str, Any]) -> None:
        self.selected: bool = values["select_all"]
        self.yes: bool = values["yes"]
        given = [flag for key, flag in NARROWING.items() if values[key]]
        if given and not self.selected:
            verb = "narrows" if len(given) == 1 else "narrow"
            raise click.UsageError(f"{', '.join(given)} {verb} --all: give --all, or task IDs alone")
        self.filter = TaskFilter(
            states=tuple(TaskState(value) for value in values["states"] or default),
            queues=tuple(values["queues"]),
            name=values["name"],
            reason=values["reason"],
            error=values["error"],
        )

    def describe(self) -> str:
        """The selection in words, for the confirmation."""
        flt = self.filter
        parts = [f"task(s) in {' or '.join(s.value for s in flt.states)}"]
        parts.append(f"of queue(s) {', '.join(flt.queues)}" if flt.queues else "of every queue")
        parts += [f"{label} {value!r}" for label, value in (("named like", flt.name), ("erring", flt.error)) if value]
        if flt.reason is not None:
            parts.append(f"archived {flt.reason.value}")
        return ", ".join(parts)


def run_bulk(state: CliState, bulk: Bulk, action: str, verb: str, ask: str) -> None:
    """``action`` (``retry`` or ``delete``, as :data:`~conveyor.selection.BULK_ACTIONS`) over every
    task ``bulk`` selects, asked first (``ask``: the question's verb) unless ``--yes``; ``verb`` says
    what was done. Exit 1 if a task could not be changed."""
    inspector = state.conveyor().inspect
    for queue in bulk.filter.queues:
        inspector.queue(queue)  # QueueNotFound: a misspelt queue must not read as "nothing matched"
    err = console(stderr=True)
    columns = (TextColumn(verb), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    # no bar where nobody watches one (piped, logged): it would leave an empty line on stderr
    with Progress(*columns, console=err, transient=True, disable=state.json or not err.is_terminal) as progress:
        bar = progress.add_task(verb, total=None)

        def step(result: BulkResult) -> None:
            if result.batches == 0:  # the matches are known, nothing changed yet
                if not bulk.yes and result.matched:
                    progress.stop()
                    click.confirm(f"{ask} {result.matched} {bulk.describe()}?", abort=True, err=True)
                    progress.start()
                progress.update(bar, total=result.matched)
            progress.update(bar, completed=result.done + result.failed)

        result = apply_all(inspector, bulk.filter, action, progress=step)
    data = {"matched": result.matched, verb: result.done, "not_changed": result.failed, "why": result.why or None}

    def render(c: Any) -> None:
        c.print(f"{verb} {result.done} of {result.matched} matching task(s)")
        if result.failed:
            c.print(f"{result.failed} changed meanwhile and were left as they are (first: {result.why})")

    emit(state.json, data, render)
    if result.failed:
        raise SystemExit(1)
