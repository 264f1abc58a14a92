"""Operator commands to workers (``CommandsWorkers``, ``conveyor.commands``): stored per worker, read by
its registry beat, escalating only, gone when the worker unregisters or the command outlives its TTL."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.brokers.base import CommandsWorkers
from conveyor.commands import COMMAND_TTL
from conveyor.errors import InvalidTransition
from conveyor.model import WorkerInfo


def _live(app: Conveyor, worker_id: str = "w-1") -> str:
    app.broker.register_worker(WorkerInfo(worker_id, "host", 1, ("default",), 1, app.now()), app.now(), ttl=60)
    return worker_id


def test_every_broker_keeps_a_command_per_worker(app: Conveyor) -> None:
    assert isinstance(app.broker, CommandsWorkers)
    one, two = _live(app, "w-1"), _live(app, "w-2")
    assert app.inspect.worker_command(one) is None
    app.inspect.command_worker(one, "quiet")
    assert (app.inspect.worker_command(one), app.inspect.worker_command(two)) == ("quiet", None)
    assert app.inspect.worker_command(one) == "quiet"  # reading keeps it


def test_commands_escalate_and_never_step_back(app: Conveyor) -> None:
    wid = _live(app)
    app.inspect.command_worker(wid, "stop")
    app.inspect.command_worker(wid, "quiet")
    assert app.inspect.worker_command(wid) == "stop"


def test_a_command_goes_with_its_worker_or_its_ttl(app: Conveyor, clock: FakeClock) -> None:
    wid = _live(app)
    app.inspect.command_worker(wid, "quiet")
    app.broker.unregister_worker(wid)
    assert app.inspect.worker_command(wid) is None
    _live(app)
    app.inspect.command_worker(wid, "stop")
    clock.advance(COMMAND_TTL + 1)
    assert app.inspect.worker_command(wid) is None


def test_a_command_needs_a_live_worker_and_a_known_command(app: Conveyor) -> None:
    with pytest.raises(InvalidTransition, match="no live worker"):
        app.inspect.command_worker("ghost", "stop")
    wid = _live(app)
    with pytest.raises(ValueError, match="unknown worker command 'pause'"):
        app.inspect.command_worker(wid, "pause")
    with pytest.raises(TypeError):
        app.inspect.command_worker(wid, None)  # type: ignore[arg-type]
