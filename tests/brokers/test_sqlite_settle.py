"""Batch settles on SQLite (completions written by one statement for the batch) against the reference."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
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


def test_completions_without_retention_leave_no_row_behind_their_settle(tmp_path: Path) -> None:
    path = tmp_path / "conveyor.db"
    broker = open_broker(f"sqlite:///{path}", BrokerPolicy())
    try:
        broker.enqueue([NewTask("held", "job", "default", "[]", unique_key="k", unique_until=NOW + 60)], NOW)
        claimed = _claimed(broker, 3) + [
            Outcome(r.id, r.lease_token or "", "complete") for r in broker.claim(["default"], NOW, 30.0, 1)
        ]
        by_id = {o.task_id: o for o in claimed}
        # in one batch: two without retention (one holding a unique key), one kept, one retried between them
        outcomes = [
            Outcome("t0", by_id["t0"].token, "complete", keep_for=0.0),
            Outcome("t1", by_id["t1"].token, "complete", keep_for=5.0),
            Outcome("t2", by_id["t2"].token, "retry", error="again"),
            Outcome("held", by_id["held"].token, "complete", keep_for=0.0),
        ]
        assert broker.settle(outcomes, NOW) == [True, True, True, True]
        with closing(sqlite3.connect(path)) as conn:  # another connection: what is committed
            rows = dict(conn.execute("SELECT id, state FROM tasks").fetchall())
            uniques = conn.execute("SELECT key FROM uniques").fetchall()
        assert rows == {"t1": "completed", "t2": "retry"}
        assert uniques == []  # released with its holder's row
        assert broker.clean(NOW + 10, 1000) == 1  # t1, once its 5 s passed; nothing else was left
    finally:
        broker.close()
