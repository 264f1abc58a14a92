"""``promote``, ``reap`` and ``clean`` over queues of several slots (layout 5), on one server (one
joined call, merged in Lua) and on the 3-master cluster (a call per slot, merged by the broker): a
``limit`` too small for everything goes to the earliest over every queue first, ties in enqueue
order, as ``memory://`` spends it (docs/architecture.md, "Upkeep over several slots")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK, SPAN
from conveyor.brokers.redis.scripts import read_source
from conveyor.model import BrokerPolicy, NewTask, Outcome, TaskState

NOW = 1_000.0


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def broker(request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    fixture = "redis_cluster_url" if request.param == "cluster" else "redis_url"
    opened = RedisBroker.from_url(str(request.getfixturevalue(fixture)), BrokerPolicy(max_archived=1))
    try:
        yield opened
    finally:
        opened.close()


def _task(task_id: str, queue: str, *, due: float | None = None, expires: float | None = None) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[]", run_at=due, expires_at=expires)


def _states(broker: RedisBroker, *task_ids: str) -> list[TaskState | None]:
    states = []
    for task_id in task_ids:
        record = broker.get(task_id, NOW + 100)
        states.append(None if record is None else record.state)
    return states


def test_a_short_promote_takes_the_earliest_due_over_every_queue(broker: RedisBroker) -> None:
    broker.enqueue([_task("late", "a", due=NOW + 5), _task("first", "c", due=NOW + 3)], NOW)
    broker.enqueue([_task("second", "b", due=NOW + 4)], NOW)
    assert broker.promote(NOW + 10, limit=1) == 1
    assert _states(broker, "first", "second", "late") == [TaskState.PENDING, TaskState.SCHEDULED, TaskState.SCHEDULED]
    assert broker.promote(NOW + 10, limit=1) == 1
    assert _states(broker, "second", "late") == [TaskState.PENDING, TaskState.SCHEDULED]


def test_ties_of_time_over_queues_go_in_enqueue_order(broker: RedisBroker) -> None:
    """Each slot numbers its own tasks; the broker's ranks make one order of them (``enqueue.lua``)."""
    broker.enqueue([_task("z1", "b", due=NOW + 3), _task("z2", "a", due=NOW + 3), _task("z3", "b", due=NOW + 3)], NOW)
    broker.enqueue([_task("y4", "a", due=NOW + 3)], NOW)
    broker.enqueue([_task("x5", "b", due=NOW + 3)], NOW)
    ids = ("z1", "z2", "z3", "y4", "x5")
    order: list[str] = []
    for _ in ids:
        assert broker.promote(NOW + 3, limit=1) == 1
        order += [task_id for task_id, state in zip(ids, _states(broker, *ids), strict=True)
                  if state is TaskState.PENDING and task_id not in order]  # fmt: skip
    assert order == list(ids)


def test_a_short_reap_takes_expired_leases_before_deadlines_earliest_first(broker: RedisBroker) -> None:
    broker.enqueue([_task("held", "b"), _task("waits", "a", expires=NOW + 2)], NOW)
    assert [record.id for record in broker.claim(["b"], NOW, 4.0)] == ["held"]
    assert broker.reap(NOW + 5, limit=1) == 1  # the lease (NOW + 4) first, over the deadline (NOW + 2)
    assert _states(broker, "held", "waits") == [TaskState.PENDING, TaskState.PENDING]
    assert broker.reap(NOW + 5, limit=1) == 1
    assert _states(broker, "waits") == [TaskState.ARCHIVED]


def test_a_short_clean_deletes_what_is_past_retention_before_what_is_over_the_cap(broker: RedisBroker) -> None:
    broker.enqueue([_task("a1", "a"), _task("a2", "a")], NOW)
    broker.archive("a1", NOW)
    broker.archive("a2", NOW + 1)  # queue a: one archived over max_archived = 1
    broker.enqueue([_task("b1", "b")], NOW)
    (claimed,) = broker.claim(["b"], NOW, 60.0)
    done = Outcome(claimed.id, claimed.lease_token or "", "complete", result='"ok"', keep_for=10.0)
    assert broker.settle([done], NOW) == [True]
    assert broker.clean(NOW + 30, limit=1) == 1  # b1, past its keep_until, before a1
    assert _states(broker, "a1") == [TaskState.ARCHIVED]
    assert broker.clean(NOW + 30, limit=1) == 1
    assert _states(broker, "a1", "a2") == [None, TaskState.ARCHIVED]


def test_a_member_chosen_but_moved_meanwhile_is_not_counted(broker: RedisBroker) -> None:
    """On a cluster the broker chooses members, then sends each slot its own: one that another process
    promoted in between is left as it is (here: sent again after it moved)."""
    broker.enqueue([_task("due", "a", due=NOW + 1)], NOW)
    prefix = broker.keys.queue_prefix("a")
    (member,) = cast("list[str]", broker.client.zrange(prefix + "due", 0, -1))
    assert broker._call("promote", prefix, NOW + 2, 1, member) == 1
    assert broker._call("promote", prefix, NOW + 2, 1, member) == 0
    assert _states(broker, "due") == [TaskState.PENDING]


def test_a_step_and_a_chunks_size_share_enqueues_first_argument() -> None:
    """``A(1) = n + SPAN * step``: every chunk's size stays below ``SPAN``, the same in Lua and Python."""
    assert ENQUEUE_CHUNK < SPAN
    assert f"local SPAN = {SPAN} " in read_source("enqueue")
