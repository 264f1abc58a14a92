"""Fixtures for CLI tests: ``cli(*args)`` runs a command in-process against the test's app (any broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest
from click.testing import CliRunner, Result

from conveyor import Conveyor
from conveyor.cli import cli as cli_group
from conveyor.cli.state import CliState


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
