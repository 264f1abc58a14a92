"""A claim over several plain queues (layout 5: a slot each; one joined call on one server) gives
every later queue's slot its upkeep before any claim, as a call over one slot would: a claim filled
in the first queue still reaps a later queue's expired lease, expires its task past its deadline and
promotes its due task. A later slot with nothing to do (nothing pending, no due time, lease or
deadline past) is passed without its upkeep (``claim.lua``, ``probe()``), its first due time still
read (docs/architecture.md, "Redis Cluster: keys per queue")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.model import BrokerPolicy, NewTask, TaskState

NOW = 1_000.0
QUEUES = ["a", "b", "c"]


@pytest.fixture
def broker(redis_url: str) -> Iterator[RedisBroker]:
    """On one server: on a cluster each slot is a call of its own, made while the claim has room."""
    with closing(RedisBroker.from_url(redis_url, BrokerPolicy())) as opened:
        yield opened


def _task(task_id: str, queue: str, *, due: float | None = None, expires: float | None = None) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[]", run_at=due, expires_at=expires)


def _state(broker: RedisBroker, task_id: str) -> TaskState | None:
    record = broker.get(task_id, NOW + 100)
    return None if record is None else record.state


def _claim_first(broker: RedisBroker, now: float) -> None:
    """A one-task claim over every queue, filled by ``first`` in queue ``a``."""
    broker.enqueue([_task("first", "a")], now)
    assert [record.id for record in broker.claim(QUEUES, now, 60.0, limit=1)] == ["first"]


def test_a_claim_filled_in_the_first_queue_reaps_a_later_queues_expired_lease(broker: RedisBroker) -> None:
    """Queue b holds only a live lease (nothing to do: passed); c an expired lease before a live one."""
    broker.enqueue([_task("live_b", "b"), _task("expired", "c"), _task("live_c", "c")], NOW)
    assert [r.id for r in broker.claim(["b"], NOW, 3600.0, limit=1)] == ["live_b"]
    assert [r.id for r in broker.claim(["c"], NOW, 5.0, limit=1)] == ["expired"]
    assert [r.id for r in broker.claim(["c"], NOW, 3600.0, limit=1)] == ["live_c"]
    _claim_first(broker, NOW + 10)
    assert _state(broker, "expired") is TaskState.PENDING  # its lease reaped
    assert (_state(broker, "live_b"), _state(broker, "live_c")) == (TaskState.ACTIVE, TaskState.ACTIVE)


def test_a_claim_filled_in_the_first_queue_expires_a_later_queues_task_past_its_deadline(
    broker: RedisBroker,
) -> None:
    """A task due in an hour whose deadline passed: the first due time is not past, the first
    deadline is."""
    broker.enqueue([_task("late", "c", due=NOW + 3600, expires=NOW + 5)], NOW)
    _claim_first(broker, NOW + 10)
    assert _state(broker, "late") is TaskState.ARCHIVED


def test_a_claim_filled_in_the_first_queue_promotes_a_later_queues_due_task(broker: RedisBroker) -> None:
    broker.enqueue([_task("due", "c", due=NOW + 5), _task("later", "b", due=NOW + 3600)], NOW)
    _claim_first(broker, NOW + 10)
    assert (_state(broker, "due"), _state(broker, "later")) == (TaskState.PENDING, TaskState.SCHEDULED)
    assert [record.id for record in broker.claim(QUEUES, NOW + 10, 60.0, limit=2)] == ["due"]


def test_an_idle_claim_passing_later_queues_notes_their_first_due_time(
    broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to claim anywhere: the earliest due time of the passed slots is what the waiter gets."""
    noted: list[float | None] = []
    monkeypatch.setattr(broker._dues, "claimed", lambda due, ran_at, present: noted.append(due))
    broker.enqueue([_task("b1", "b", due=NOW + 50), _task("c1", "c", due=NOW + 30)], NOW)
    assert broker.claim(QUEUES, NOW, 60.0, limit=1) == []
    broker.enqueue([_task("b2", "b", due=NOW + 20)], NOW)
    assert broker.claim(QUEUES, NOW, 60.0, limit=1) == []
    assert noted == [NOW + 30, NOW + 20]


def test_queue_order_holds_across_passed_and_visited_slots(broker: RedisBroker) -> None:
    """The first queue is drained first; an idle b is passed and c's tasks follow a's."""
    broker.enqueue([_task("c1", "c"), _task("a1", "a"), _task("c2", "c"), _task("a2", "a")], NOW)
    broker.enqueue([_task("b_later", "b", due=NOW + 3600)], NOW)
    assert [record.id for record in broker.claim(QUEUES, NOW, 60.0, limit=3)] == ["a1", "a2", "c1"]
    assert [record.id for record in broker.claim(QUEUES, NOW, 60.0, limit=3)] == ["c2"]
