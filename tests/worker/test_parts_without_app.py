"""The worker's periodic services take ``(broker, clock)``, not an app: each runs on a bare broker and a
``FakeClock``, and acts by that clock alone (issue 39: a service test needs no ``Conveyor``)."""

from __future__ import annotations

from conveyor.brokers.memory import MemoryBroker
from conveyor.clock import FakeClock
from conveyor.model import NewTask, TaskState
from conveyor.options import resolve
from conveyor.outcomes import complete
from conveyor.worker.upkeep import Janitor, Promoter, Reaper

NOW = 1_700_000_000.0


def state_of(broker: MemoryBroker, task_id: str, now: float) -> TaskState | None:
    record = broker.get(task_id, now)
    return None if record is None else record.state


def test_the_promoter_moves_a_due_task_to_pending_by_its_clock() -> None:
    broker, clock = MemoryBroker(), FakeClock(NOW)
    broker.enqueue([NewTask(id="t", name="job", queue="default", payload="[]", run_at=NOW + 5)], NOW)
    promoter = Promoter(broker, clock, interval=60.0)
    promoter.tick()
    assert state_of(broker, "t", NOW) is TaskState.SCHEDULED
    clock.advance(5)
    promoter.tick()
    assert state_of(broker, "t", NOW + 5) is TaskState.PENDING


def test_the_reaper_reclaims_an_expired_lease_by_its_clock() -> None:
    broker, clock = MemoryBroker(), FakeClock(NOW)
    broker.enqueue([NewTask(id="t", name="job", queue="default", payload="[]")], NOW)
    assert [record.id for record in broker.claim(["default"], NOW, 10.0)] == ["t"]
    reaper = Reaper(broker, clock, interval=60.0)
    reaper.tick()
    assert state_of(broker, "t", NOW) is TaskState.ACTIVE
    clock.advance(11)
    reaper.tick()
    record = broker.get("t", NOW + 11)
    assert record is not None and record.state is TaskState.PENDING and record.stalls == 1


def test_the_janitor_deletes_a_finished_task_past_its_retention_by_its_clock() -> None:
    broker, clock = MemoryBroker(), FakeClock(NOW)
    broker.enqueue([NewTask(id="t", name="job", queue="default", payload="[]")], NOW)
    claimed = broker.claim(["default"], NOW, 10.0)[0]
    assert claimed.lease_token is not None
    options = resolve({"retention": 60.0}, None)
    assert broker.settle([complete(claimed, claimed.lease_token, "null", options)], NOW) == [True]
    janitor = Janitor(broker, clock, interval=60.0)
    janitor.tick()
    assert broker.queues(NOW)[0].counts["completed"] == 1
    clock.advance(61)
    janitor.tick()
    assert broker.clean(NOW + 61) == 0  # the janitor deleted it: nothing is left for another sweep
