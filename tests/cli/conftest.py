"""Fixtures for CLI tests: ``cli(*args)`` runs a command in-process against the test's app (any broker);
``spawn(args, env=...)`` runs one as a real process, stopped at teardown."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
from click.testing import CliRunner, Result

from conveyor import Conveyor
from conveyor.cli import cli as cli_group
from conveyor.cli.state import CliState

from .procs import Spawn, popen_conveyor


class Invoke(Protocol):
    def __call__(self, *args: str, input: str | None = None) -> Result: ...


@pytest.fixture
def cli(app: Conveyor) -> Invoke:
    """Run ``conveyor <args>`` with click's runner, on the parametrized broker (the app is injected,
    so a ``memory://`` broker persists across calls within a test)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli_group, list(args), obj=CliState(app=app), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def failing_task(app: Conveyor) -> Callable[[], str]:
    """Enqueue a task whose handler raises, run it: returns the id of the archived task (one error)."""

    @app.task(max_retries=0)
    def explode(x: int) -> None:
        raise ValueError(f"boom {x}")

    def make() -> str:
        handle = explode.enqueue(7)
        app.worker().run_until_idle()
        return handle.id

    return make


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start ``python -m conveyor <args>`` in the background (``procs.popen_conveyor``); every process
    still running at teardown is killed, and every one is reaped."""
    procs: list[subprocess.Popen[str]] = []

    def start(args: list[str], *, env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
        proc = popen_conveyor(args, env=env, cwd=cwd)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
