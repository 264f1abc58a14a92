"""``conveyor``: operate queues from a terminal. Every command is a thin layer over the ``Inspector``.

The broker comes from ``--url`` or ``CONVEYOR_URL``. Output is a rich table on a terminal and JSON with
``--json``. User mistakes (bad ids, bad JSON, unreachable broker) print one line and exit non-zero.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from conveyor.cli import doctor, queues, serve, tasks
from conveyor.cli.state import CliState
from conveyor.errors import ConveyorError

__all__ = ["cli", "main"]


#: What other task queues' CLIs call our commands (Celery, RQ, asynq, BullMQ boards): named in the
#: "no such command" error, where click's own spelling match finds nothing.
PEER_NAMES = {
    "retry": "run-now",
    "requeue": "run-now",
    "runall": "run-now",
    "revoke": "cancel",
    "kill": "cancel",
    "inspect": "show",
    "info": "show",
    "status": "stats",
    "flush": "purge",
    "empty": "purge",
}


class ConveyorGroup(click.Group):
    """Turns the errors users cause into one clean line and exit status 1 (never a traceback)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            ours = PEER_NAMES.get(args[0]) if args else None
            if ours is None or "Did you mean" in exc.message:
                raise
            raise click.UsageError(f"No such command {args[0]!r}. Did you mean {ours!r}?", ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ConveyorError, ValueError, TypeError, OSError) as exc:
            raise click.ClickException(str(exc) or type(exc).__name__) from exc


@click.group(cls=ConveyorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="CONVEYOR_URL",
    metavar="URL",
    help="Broker URL (memory://, sqlite:///path.db, redis://host:6379/0). Default: $CONVEYOR_URL, else sqlite.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (every command).")
@click.option("-v", "--verbose", count=True, help="Log more (-v: info, -vv: debug).")
@click.version_option(package_name="conveyor")
@click.pass_context
def cli(ctx: click.Context, url: str | None, as_json: bool, verbose: int) -> None:
    """Conveyor: run workers, inspect and operate queues, serve the dashboard."""
    state = ctx.ensure_object(CliState)
    if url is None and os.environ.get("CONVEYOR_URL") == "":
        url = ""  # set but empty (a template left unfilled): as wrong as --url ''
    if url is not None and not url.strip():
        raise click.BadParameter(
            "empty broker URL; expected memory://, sqlite:///path.db or redis://host:6379/0",
            param_hint="--url / CONVEYOR_URL",
        )
    if url:
        state.url = url
    state.json = state.json or as_json
    ctx.call_on_close(state.close)
    _configure_logging(verbose)


def _configure_logging(verbose: int) -> None:
    """The library never configures logging; the CLI does, once, on stderr."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logger = logging.getLogger("conveyor")
    logger.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


class _StderrHandler(logging.Handler):
    """Writes each record to whatever ``sys.stderr`` is at that moment (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


for _command in (
    tasks.enqueue,
    tasks.ls,
    tasks.show,
    tasks.run_now,
    tasks.archive,
    tasks.delete,
    tasks.cancel,
    queues.stats,
    queues.pause,
    queues.resume,
    queues.purge,
    queues.queues,
    doctor.doctor,
    serve.worker,
    serve.dashboard,
    serve.demo,
):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point (the process ends with the command: ``exit_process``)."""
    try:
        cli(prog_name="conveyor")
    except SystemExit as done:
        from conveyor.worker.entry import exit_process  # here: most commands never load the worker

        exit_process(done.code)
