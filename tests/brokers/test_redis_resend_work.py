"""The calls on stored tasks sent again after their connection broke mid-reply answer as their first
send did: a settle, a claim, and an operator's cancel, delete, run_now and archive.

As in ``test_redis_resend.py`` (the enqueue), a ``CuttingProxy`` forwards the call, lets the server
run it, and closes the connection instead of forwarding the reply, so the broker sends the call again
and the second send meets what the first did. Without an answer kept for it, a settle sent again
would answer False (its outcome stored, the worker told it was discarded), a claim would take other
tasks while its first send's stayed active, leased to nobody, until their lease expired, and an
operator's action would answer ``InvalidTransition`` or ``TaskNotFound`` for what it did itself.
Every test runs in layout 5 and layout 4; the last ones on the session's 3-master cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.errors import InvalidTransition, TaskNotFound
from conveyor.model import Event, Outcome, TaskRecord, TaskState
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .resent import NOW, cut_on_cluster, cut_once, open_broker, task

SETTLE = b"_settle"  # in the function names the calls carry (scripts.py)


@pytest.fixture
def broker(proxy: CuttingProxy, layout: str) -> Iterator[RedisBroker]:
    opened = open_broker(proxy, layout, "t" + uuid.uuid4().hex)
    try:
        yield opened
    finally:
        opened.close()


def claimed(broker: RedisBroker, count: int = 1) -> list[TaskRecord]:
    """``count`` tasks of queue ``q`` enqueued and claimed (a lease of 30 s)."""
    broker.enqueue([task(broker) for _ in range(count)], NOW)
    records = broker.claim(["q"], NOW, 30.0, limit=count)
    assert len(records) == count
    return records


def outcome(record: TaskRecord, kind: str, **fields: object) -> Outcome:
    return Outcome(record.id, record.lease_token or "", kind, **fields)  # type: ignore[arg-type]


SETTLED: dict[str, tuple[dict[str, Any], TaskState | None]] = {  # outcome fields, the state it leaves
    "complete": ({"kind": "complete", "result": "1"}, TaskState.COMPLETED),
    "complete, kept 0 s": ({"kind": "complete", "result": "1", "keep_for": 0.0}, None),
    "retry soon": ({"kind": "retry", "error": "E: x", "run_at": NOW + 5}, TaskState.RETRY),
    "retry later": ({"kind": "retry", "error": "E: x", "run_at": NOW + 3600}, TaskState.RETRY),
    "archive": ({"kind": "archive", "error": "E: x"}, TaskState.ARCHIVED),
    "release": ({"kind": "release"}, TaskState.PENDING),
}


@pytest.mark.parametrize("settled", list(SETTLED), ids=list(SETTLED))
def test_a_settle_sent_again_answers_applied(proxy: CuttingProxy, broker: RedisBroker, settled: str) -> None:
    fields, state = SETTLED[settled]
    (record,) = claimed(broker)
    made = cut_once(proxy, SETTLE)
    assert broker.settle([outcome(record, **fields)], NOW) == [True]
    made()
    stored = broker.get(record.id, NOW)
    assert (stored.state if stored else None) == state


def test_a_batch_settle_sent_again_answers_as_its_first_send(proxy: CuttingProxy, broker: RedisBroker) -> None:
    first, second, third = claimed(broker, 3)
    stale = Outcome(third.id, "not-its-token", "complete")
    batch = [outcome(first, "complete"), outcome(second, "retry", error="E: x", run_at=NOW + 5), stale]
    made = cut_once(proxy, SETTLE)
    assert broker.settle(batch, NOW) == [True, True, False]
    made()
    assert broker.settle([outcome(third, "complete")], NOW) == [True]  # the stale one stored nothing


def test_a_second_settle_of_a_lease_after_a_resend_is_still_refused(proxy: CuttingProxy, broker: RedisBroker) -> None:
    (record,) = claimed(broker)
    made = cut_once(proxy, SETTLE)
    assert broker.settle([outcome(record, "complete", result="1")], NOW) == [True]
    made()
    assert broker.settle([outcome(record, "complete", result="2")], NOW) == [False]
    stored = broker.get(record.id, NOW)
    assert stored is not None and stored.result == "1"


@pytest.mark.parametrize("kind", ["complete", "release"])
def test_a_settle_sent_again_tells_local_subscribers_once(proxy: CuttingProxy, broker: RedisBroker, kind: str) -> None:
    (record,) = claimed(broker)
    heard: list[Event] = []
    stop = broker.subscribe(heard.append)
    try:
        made = cut_once(proxy, SETTLE)
        assert broker.settle([outcome(record, kind)], NOW) == [True]
        made()
        new = "completed" if kind == "complete" else "pending"
        assert [(event.task_id, event.new_state) for event in heard] == [(record.id, new)]
    finally:
        stop()


def test_a_lease_completed_through_a_lost_reply_raises_nothing(proxy: CuttingProxy, layout: str) -> None:
    """What a worker or a consumer sees: its outcome stored, not ``LeaseLost`` (discarded)."""
    app = Conveyor(broker=open_broker(proxy, layout, "t" + uuid.uuid4().hex))
    try:
        handle = app.enqueue("job")
        lease = app.claim()
        assert lease is not None
        made = cut_once(proxy, SETTLE)
        lease.complete(42)
        made()
        assert app.get(handle.id).result == 42
    finally:
        app.close()


def answers_kept(broker: RedisBroker) -> int:
    """The answers kept for a repeat in the broker's namespace (enqueues keep one each)."""
    return len(broker.client.keys("{" + broker.config.namespace + "*sent:*"))


@pytest.mark.parametrize(("settled", "kept"), [("complete", 0), ("retry later", 0), ("archive", 0), ("release", 1)])
def test_a_settle_keeps_its_answer_only_where_its_rows_may_not_show_it(
    broker: RedisBroker, settled: str, kept: int
) -> None:
    """The common completion costs no write for a repeat: its row shows the call's token."""
    fields, _ = SETTLED[settled]
    (record,) = claimed(broker)
    before = answers_kept(broker)
    assert broker.settle([outcome(record, **fields)], NOW) == [True]
    assert answers_kept(broker) == before + kept


CLAIM = b"_claim"


@pytest.mark.parametrize("limit", [1, 3])
def test_a_claim_sent_again_answers_the_tasks_its_first_send_leased(
    proxy: CuttingProxy, broker: RedisBroker, limit: int
) -> None:
    broker.enqueue([task(broker) for _ in range(limit + 1)], NOW)
    made = cut_once(proxy, CLAIM)
    records = broker.claim(["q"], NOW, 30.0, limit=limit)
    made()
    assert len(records) == limit
    assert [broker.get(record.id, NOW) for record in records] == records  # leased to this caller, as told
    assert broker.settle([outcome(record, "complete") for record in records], NOW) == [True] * limit
    assert len(broker.claim(["q"], NOW, 30.0, limit=10)) == 1  # the one left, never leased to nobody


def test_a_claim_sent_again_leaves_out_a_task_cancelled_meanwhile(
    proxy: CuttingProxy, broker: RedisBroker, redis_server: RedisServer, layout: str
) -> None:
    """The first of its tasks cancelled between the two sends: the second is answered alone, its
    lease token renumbered as the first of the reply."""
    namespace = broker.config.namespace
    operator = RedisBroker(
        RedisConfig.from_url(redis_server.namespace_url(namespace)),
        keys=Keys(namespace) if layout == "layout 4" else None,
    )
    first, second = replace(task(broker), priority=10), task(broker)
    broker.enqueue([first, second], NOW)
    try:
        made = cut_once(proxy, CLAIM, then=lambda: operator.cancel(first.id, NOW))
        records = broker.claim(["q"], NOW, 30.0, limit=2)
        made()
    finally:
        operator.close()
    assert [record.id for record in records] == [second.id]
    assert broker.get(second.id, NOW) == records[0]
    assert broker.settle([outcome(records[0], "complete")], NOW) == [True]


def test_a_claim_sent_again_tells_local_subscribers_once(proxy: CuttingProxy, broker: RedisBroker) -> None:
    broker.enqueue([task(broker)], NOW)
    heard: list[Event] = []
    stop = broker.subscribe(heard.append)
    try:
        made = cut_once(proxy, CLAIM)
        (record,) = broker.claim(["q"], NOW, 30.0)
        made()
        assert [(event.task_id, event.new_state) for event in heard] == [(record.id, "active")]
    finally:
        stop()


def test_a_claim_sent_again_after_a_wait_answers_the_task_it_leased(proxy: CuttingProxy, broker: RedisBroker) -> None:
    """A claim after an idle wait runs at the server's TIME: the second send runs later than the first."""
    broker.enqueue([task(broker)], NOW)
    made = cut_once(proxy, CLAIM)
    records = broker.claim_after_wait(["q"], broker.server_clock(), 30.0, 1, 0.5)
    made()
    assert len(records) == 1 and broker.get(records[0].id, NOW) == records[0]


def test_a_claim_over_queues_of_several_slots_sent_again_answers_its_tasks(
    proxy: CuttingProxy, broker: RedisBroker
) -> None:
    """On one server a claim over queues of several slots is one call (layout 5)."""
    other = task(broker)
    suffix = broker.id_suffixes()
    broker.enqueue(
        [task(broker), replace(other, queue="r", id=other.id.split("~")[0] + (suffix("r") if suffix else ""))], NOW
    )
    made = cut_once(proxy, CLAIM)
    records = broker.claim(["q", "r"], NOW, 30.0, limit=2)
    made()
    assert sorted(record.queue for record in records) == ["q", "r"]
    assert broker.settle([outcome(record, "complete") for record in records], NOW) == [True, True]


def test_a_claim_sent_again_finding_none_of_its_tasks_claims_afresh(
    proxy: CuttingProxy, broker: RedisBroker, redis_server: RedisServer, layout: str
) -> None:
    """Its one task, in the second queue's slot, cancelled between the sends: the second send claims
    as a new claim would, from the first queue on."""
    namespace = broker.config.namespace
    operator = RedisBroker(
        RedisConfig.from_url(redis_server.namespace_url(namespace)),
        keys=Keys(namespace) if layout == "layout 4" else None,
    )
    suffix = broker.id_suffixes()
    first = task(broker)
    in_r = replace(first, queue="r", id=first.id.split("~")[0] + (suffix("r") if suffix else ""))
    later = task(broker)
    broker.enqueue([in_r], NOW)

    def meanwhile() -> None:
        operator.cancel(in_r.id, NOW)
        operator.enqueue([later], NOW)

    try:
        made = cut_once(proxy, CLAIM, then=meanwhile)
        records = broker.claim(["q", "r"], NOW, 30.0, limit=1)
        made()
    finally:
        operator.close()
    assert [record.id for record in records] == [later.id]


ADMIN: dict[str, tuple[bytes, Callable[[RedisBroker, str], object], object, TaskState | None]] = {
    # the call's marker, the call, what it answers, and the state it leaves the task in (None: gone)
    "cancel": (b"_cancel", lambda broker, task_id: broker.cancel(task_id, NOW), TaskState.ARCHIVED, TaskState.ARCHIVED),
    "delete": (b"_delete", lambda broker, task_id: broker.delete(task_id, NOW), None, None),
    "run_now": (b"_run_now", lambda broker, task_id: broker.run_now(task_id, NOW), None, TaskState.PENDING),
    "archive": (b"_archive", lambda broker, task_id: broker.archive(task_id, NOW), None, TaskState.ARCHIVED),
}


def scheduled(broker: RedisBroker) -> str:
    """A task of queue ``q`` due in an hour: every operator action applies to it."""
    new = replace(task(broker), run_at=NOW + 3600)
    broker.enqueue([new], NOW)
    return new.id


@pytest.mark.parametrize("action", list(ADMIN))
def test_an_operator_action_sent_again_answers_as_its_first_send(
    proxy: CuttingProxy, broker: RedisBroker, action: str
) -> None:
    marker, act, answer, state = ADMIN[action]
    task_id = scheduled(broker)
    made = cut_once(proxy, marker)
    assert act(broker, task_id) == answer  # neither InvalidTransition nor TaskNotFound
    made()
    stored = broker.get(task_id, NOW)
    assert (stored.state if stored else None) == state


@pytest.mark.parametrize("action", ["cancel", "delete"])
def test_an_operator_action_done_twice_is_still_refused_the_second_time(
    proxy: CuttingProxy, broker: RedisBroker, action: str
) -> None:
    marker, act, _, _ = ADMIN[action]
    task_id = scheduled(broker)
    made = cut_once(proxy, marker)
    act(broker, task_id)
    made()
    with pytest.raises(InvalidTransition if action == "cancel" else TaskNotFound):
        act(broker, task_id)


def test_a_refused_operator_action_sent_again_is_refused_again(proxy: CuttingProxy, broker: RedisBroker) -> None:
    (record,) = claimed(broker)  # active: delete refuses it
    made = cut_once(proxy, b"_delete")
    with pytest.raises(InvalidTransition):
        broker.delete(record.id, NOW)
    made()


def test_a_withdraw_sent_again_answers_the_tasks_its_first_send_removed(
    proxy: CuttingProxy, broker: RedisBroker
) -> None:
    """An enqueue short of replicas takes its tasks back (``replication.py``); a second send of that
    call must not answer them as started (``ReplicationTimeout`` would tell the caller not to
    enqueue them again: they would be lost)."""
    new = task(broker)
    broker.enqueue([new], NOW)
    made = cut_once(proxy, b"_withdraw")
    assert broker._invoke("withdraw", broker._task_prefix(new.id), repr(NOW), [new.id])[1] == "1"
    made()
    assert broker.get(new.id, NOW) is None


@pytest.fixture
def cluster_broker(redis_cluster: LocalCluster, cluster_proxies: list[CuttingProxy]) -> Iterator[RedisBroker]:
    opened = RedisBroker(RedisConfig.from_url(redis_cluster.namespace_url()))
    try:
        assert opened.cluster
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("settled", ["complete", "retry soon"])
def test_a_settle_sent_again_on_a_cluster_answers_applied(
    cluster_proxies: list[CuttingProxy], cluster_broker: RedisBroker, settled: str
) -> None:
    fields, state = SETTLED[settled]
    (record,) = claimed(cluster_broker)
    with cut_on_cluster(cluster_proxies, SETTLE):
        assert cluster_broker.settle([outcome(record, **fields)], NOW) == [True]
    stored = cluster_broker.get(record.id, NOW)
    assert stored is not None and stored.state == state


def test_a_claim_sent_again_on_a_cluster_answers_its_tasks(
    cluster_proxies: list[CuttingProxy], cluster_broker: RedisBroker
) -> None:
    cluster_broker.enqueue([task(cluster_broker) for _ in range(3)], NOW)
    with cut_on_cluster(cluster_proxies, CLAIM):
        records = cluster_broker.claim(["q"], NOW, 30.0, limit=2)
    assert len(records) == 2 and [cluster_broker.get(record.id, NOW) for record in records] == records
    assert len(cluster_broker.claim(["q"], NOW, 30.0, limit=10)) == 1


@pytest.mark.parametrize("action", ["cancel", "delete"])
def test_an_operator_action_sent_again_on_a_cluster_answers_as_its_first_send(
    cluster_proxies: list[CuttingProxy], cluster_broker: RedisBroker, action: str
) -> None:
    marker, act, answer, state = ADMIN[action]
    task_id = scheduled(cluster_broker)
    with cut_on_cluster(cluster_proxies, marker):
        assert act(cluster_broker, task_id) == answer
    stored = cluster_broker.get(task_id, NOW)
    assert (stored.state if stored else None) == state
