"""Batch settles on SQLite (completions written by one statement for the batch) against the reference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.brokers import open_broker
from conveyor.brokers.base import Broker
from conveyor.model import BrokerPolicy, NewTask, Outcome, TaskState

NOW = 1_000_000.0


@pytest.fixture(params=["memory", "sqlite"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'conveyor.db'}"
    opened = open_broker(url, BrokerPolicy())
    yield opened
    opened.close()


def _claimed(broker: Broker, count: int) -> list[Outcome]:
    broker.enqueue([NewTask(f"t{i}", "job", "default", "[]") for i in range(count)], NOW)
    return [Outcome(r.id, r.lease_token or "", "complete") for r in broker.claim(["default"], NOW, 30.0, count)]


def test_an_outcome_the_broker_refuses_leaves_the_completions_before_it_applied(broker: Broker) -> None:
    first, second, third = _claimed(broker, 3)
    bogus = Outcome(second.task_id, second.token, "bogus")
    with pytest.raises(ValueError, match="bogus"):
        broker.settle([first, bogus, third], NOW)
    states = [broker.get(f"t{i}", NOW) for i in range(3)]
    assert [s.state if s else None for s in states] == [TaskState.COMPLETED, TaskState.ACTIVE, TaskState.ACTIVE]


def test_a_second_outcome_for_one_task_in_a_batch_finds_its_lease_gone(broker: Broker) -> None:
    (done,) = _claimed(broker, 1)
    retry = Outcome(done.task_id, done.token, "retry", error="late")
    assert broker.settle([done, retry, done], NOW) == [True, False, False]
    rec = broker.get(done.task_id, NOW)
    assert rec is not None and rec.state is TaskState.COMPLETED and rec.last_error is None
