"""``wait_replicas``: writes confirmed by replicas (``WAIT``), on real masters and replicas: one master
and its replica, and a 3-master Redis Cluster with a replica per master, where each write script's
``WAIT`` goes to the master that ran it, on the same connection, so the single server's guarantees hold
per master (``deployment``, ``replicated.py``).

Replicas are frozen with SIGSTOP to make ``WAIT`` time out (the masters keep their links: nothing is
disconnected within the test), and resumed with SIGCONT before the next test. What a replica holds is
read on the replica itself, key by key, without going through the broker.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlencode

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.errors import ConfigurationError, QueueFull, ReplicationTimeout, TaskNotFound
from conveyor.model import BrokerPolicy, Outcome, QueueSettings, TaskRecord, TaskState
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.sentinel import ReplicaSet, poll

from .replicated import Replicated
from .test_redis import task

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NOW = 1_000_000.0


@pytest.fixture(scope="module")
def replica_set() -> Iterator[ReplicaSet]:
    with ReplicaSet(replicas=1) as servers:
        yield servers


@pytest.fixture(scope="module", params=["server", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Iterator[Replicated]:
    """One master and its replica, or 3 masters with a replica each."""
    if request.param == "server":
        servers: ReplicaSet = request.getfixturevalue("replica_set")
        yield Replicated("server", servers.master.url, [(servers.master, servers.replicas[0])])
        return
    with LocalCluster(masters=3, replicas=1) as cluster:
        pairs = [(master, replica) for master, (replica,) in zip(cluster.masters, cluster.replicas_of, strict=True)]
        yield Replicated("cluster", cluster.url, pairs)


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex


@pytest.fixture
def waiting(deployment: Replicated, namespace: str) -> Iterator[RedisBroker]:
    """A broker whose writes wait for one replica, at most 300 ms."""
    broker = deployment.open(namespace, wait_replicas="1", wait_timeout="300")
    yield broker
    broker.close()


def _open(replica_set: ReplicaSet, namespace: str, **options: str) -> RedisBroker:
    return Replicated("server", replica_set.master.url, []).open(namespace, **options)


def _found(broker: RedisBroker, task_id: str) -> TaskRecord | None:
    return broker.get(task_id, NOW)


def test_a_url_may_ask_for_replicas(deployment: Replicated, namespace: str) -> None:
    broker = deployment.open(namespace, wait_replicas="1")
    try:
        assert broker.config.wait_replicas == 1
        assert broker.enqueue([task("a")], NOW) == [None]
        assert broker.cluster == (deployment.kind == "cluster")
    finally:
        broker.close()


def test_an_acknowledged_enqueue_is_on_the_replica_when_it_returns(
    waiting: RedisBroker, deployment: Replicated, namespace: str
) -> None:
    for queue in ("q", "emails", "reports"):  # several queues: more than one master once queues have tags of their own
        assert waiting.enqueue([task(f"{queue}-a", queue)], NOW) == [None]
        assert waiting.enqueue([task(f"{queue}-b{i}", queue) for i in range(1200)], NOW) == [None] * 1200
        assert deployment.mirrored(namespace)  # read at once: each WAIT returned after the replica had it
    assert _found(waiting, "emails-b1199") is not None


def test_an_enqueue_no_replica_confirms_raises_and_is_withdrawn(
    waiting: RedisBroker, deployment: Replicated, namespace: str
) -> None:
    with deployment.replicas_stopped():
        with pytest.raises(ReplicationTimeout) as raised:
            waiting.enqueue([task("lost")], NOW)
        assert (raised.value.wanted, raised.value.acknowledged) == (1, 0)
        assert (raised.value.withdrawn, raised.value.started) == (("lost",), ())
        assert _found(waiting, "lost") is None
        assert waiting.claim(["q"], NOW, 30.0, limit=10) == []  # nothing left to run
    waiting.enqueue([task("after")], NOW)  # confirmed: the replica has replayed everything before it
    assert _found(waiting, "after") is not None
    assert deployment.mirrored(namespace)  # the replica got the task, then its withdrawal


def test_a_batch_withdraws_only_the_tasks_it_stored(waiting: RedisBroker, deployment: Replicated) -> None:
    waiting.enqueue([task("kept")], NOW)
    with deployment.replicas_stopped(), pytest.raises(ReplicationTimeout) as raised:
        waiting.enqueue([task("kept"), task("x"), task("y")], NOW)
    assert raised.value.withdrawn == ("x", "y")
    assert _found(waiting, "kept") is not None  # the duplicate's existing task is not touched
    assert _found(waiting, "x") is None and _found(waiting, "y") is None


def test_a_long_call_refused_later_names_the_chunks_the_replicas_confirmed(
    waiting: RedisBroker, deployment: Replicated, namespace: str
) -> None:
    """500 tasks a call: the first chunk stored and confirmed, the second refused (``QueueFull``) or
    not confirmed (``ReplicationTimeout``, the replicas frozen once the first was): ``stored`` names
    the first chunk's tasks, which stay; the second's are gone either way."""
    waiting.configure_queue(QueueSettings("q", max_size=550))
    first, second = [task(f"f{n}") for n in range(500)], [task(f"s{n}") for n in range(100)]
    with pytest.raises(QueueFull) as full:
        waiting.enqueue([*first, *second], NOW)
    assert sorted(full.value.stored) == sorted(new.id for new in first)
    waiting.configure_queue(QueueSettings("q", max_size=None))
    more = [task(f"m{n}") for n in range(500)]
    store = waiting._store_tasks
    calls: list[int] = []

    def frozen_after_the_first(*args: Any, **kwargs: Any) -> list[str | None]:
        calls.append(len(calls))
        if len(calls) == 2:
            stack.enter_context(deployment.replicas_stopped())
        return store(*args, **kwargs)

    with ExitStack() as stack, pytest.raises(ReplicationTimeout) as short:
        waiting._store_tasks = frozen_after_the_first  # type: ignore[method-assign]
        waiting.enqueue([*more, *second], NOW)
    assert sorted(short.value.stored) == sorted(new.id for new in more)
    assert sorted(short.value.withdrawn) == sorted(new.id for new in second)
    assert all(_found(waiting, new.id) is not None for new in more)
    assert all(_found(waiting, new.id) is None for new in second)
    assert "500 task(s) of the call stay stored" in str(short.value)


def _enqueue_racing(
    deployment: Replicated, producer: RedisBroker, task_id: str, act: Callable[[], bool]
) -> ReplicationTimeout:
    """Enqueue ``task_id`` with the replicas stopped while ``act`` is tried every 5 ms on a thread until
    it succeeds (each of the enqueue's write calls, 3 here with a take, waits the whole 1 s timeout:
    ample time); the ReplicationTimeout it raised."""
    racer = threading.Thread(target=poll, args=(act, 10.0, f"{act.__name__} to succeed", 0.005))
    with deployment.replicas_stopped():
        racer.start()
        try:
            with pytest.raises(ReplicationTimeout) as raised:
                producer.enqueue([task(task_id)], NOW)
        finally:
            racer.join()
    return raised.value


def test_a_task_a_worker_claimed_during_the_wait_is_reported_started_and_left_running(
    deployment: Replicated, namespace: str
) -> None:
    producer = deployment.open(namespace, wait_replicas="1", wait_timeout="1000")
    worker = deployment.open(namespace)
    claimed: list[TaskRecord] = []

    def claim_it() -> bool:
        claimed.extend(worker.claim(["q"], NOW, 30.0))
        return bool(claimed)

    try:
        raised = _enqueue_racing(deployment, producer, "raced", claim_it)
        assert (raised.withdrawn, raised.started, raised.stored) == ((), ("raced",), ("raced",))
        record = _found(worker, "raced")
        assert record is not None and record.state is TaskState.ACTIVE
        assert [task.id for task in claimed] == ["raced"]
    finally:
        producer.close()
        worker.close()


def test_other_writes_short_of_replicas_take_effect(waiting: RedisBroker, deployment: Replicated) -> None:
    waiting.enqueue([task("a")], NOW)
    with deployment.replicas_stopped():
        (claimed,) = waiting.claim(["q"], NOW, 30.0)
        outcome = Outcome("a", claimed.lease_token or "", "complete", result="1")
        assert waiting.settle([outcome], NOW) == [True]
    done = _found(waiting, "a")
    assert done is not None and done.state is TaskState.COMPLETED


def test_without_wait_replicas_writes_do_not_wait(deployment: Replicated, namespace: str) -> None:
    broker = deployment.open(namespace)
    try:
        with deployment.replicas_stopped():
            assert broker.enqueue([task("a")], NOW) == [None]  # the replicas are frozen: no WAIT was sent
    finally:
        broker.close()


def test_writes_short_of_replicas_are_logged_once_a_minute(
    deployment: Replicated, waiting: RedisBroker, caplog: pytest.LogCaptureFixture
) -> None:
    waiting.enqueue([task("a")], NOW)
    with deployment.replicas_stopped(), caplog.at_level(logging.DEBUG, "conveyor.brokers.redis.replication"):
        (claimed,) = waiting.claim(["q"], NOW, 30.0)
        assert waiting.settle([Outcome("a", claimed.lease_token or "", "complete", result="1")], NOW) == [True]
    logged = [(record.levelno, record.getMessage().partition(" ")[0]) for record in caplog.records]
    assert logged == [(logging.WARNING, "claim"), (logging.DEBUG, "settle")]  # one warning a minute, at most


@pytest.mark.parametrize(
    "options",
    [
        {"wait_replicas": "-1"},
        {"wait_replicas": "one"},
        {"wait_replicas": "1", "wait_timeout": "0"},
        {"wait_replicas": "1", "wait_timeout": "5000"},  # not below socket_timeout (5 s)
        {"wait_replicas": "1", "wait_timeout": "1.5"},
    ],
)
def test_bad_wait_options_are_refused_when_the_url_is_read(options: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="wait_"):
        RedisBroker.from_url(f"redis://127.0.0.1:1/0?{urlencode(options)}", BrokerPolicy())


def test_an_acl_user_with_the_documented_permissions_may_wait(replica_set: ReplicaSet, namespace: str) -> None:
    admin = replica_set.master.client()
    try:
        rules = NEEDED_ACL.replace("NS", namespace).split()
        admin.execute_command("ACL", "SETUSER", "waiter", "reset", "on", ">pw", *rules)  # type: ignore[no-untyped-call]
        url = replica_set.master.url.replace("redis://", "redis://waiter:pw@")
        broker = RedisBroker.from_url(f"{url}?namespace={namespace}&wait_replicas=1", BrokerPolicy())
        try:
            assert broker.enqueue([task("a")], NOW) == [None]  # WAIT is in +@connection
            (claimed,) = broker.claim(["q"], NOW, 30.0)
            assert broker.settle([Outcome("a", claimed.lease_token or "", "complete", result="1")], NOW) == [True]
        finally:
            broker.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "waiter")  # type: ignore[no-untyped-call]
        admin.close()


def test_preflight_says_whether_there_are_enough_replicas_to_wait_for(replica_set: ReplicaSet, namespace: str) -> None:
    for wanted, ok in (("1", True), ("2", False)):
        broker = _open(replica_set, namespace, wait_replicas=wanted)
        try:
            [replicas] = [finding for finding in broker.preflight() if finding.name == "replicas"]
            assert (replicas.ok, replicas.detail.partition(",")[0]) == (ok, "1 connected")
            assert replicas.failing is not ok  # too few: every enqueue fails, so doctor says FAIL (exit 1)
        finally:
            broker.close()
    broker = _open(replica_set, namespace)
    try:
        assert "replicas" not in [finding.name for finding in broker.preflight()]  # not asked for: not checked
    finally:
        broker.close()


def test_a_task_deleted_during_the_wait_is_reported_gone_not_started(deployment: Replicated, namespace: str) -> None:
    """It was reported started ("it ran or runs: do not enqueue it again") though nothing held it: in
    a failover that lost it, the caller then dropped a task no one would run."""
    producer = deployment.open(namespace, wait_replicas="1", wait_timeout="1000")
    operator = deployment.open(namespace)

    def delete_it() -> bool:
        try:
            operator.delete("doomed", NOW)
        except TaskNotFound:
            return False
        return True

    try:
        raised = _enqueue_racing(deployment, producer, "doomed", delete_it)
        assert (raised.withdrawn, raised.started, raised.gone) == ((), (), ("doomed",))
        assert "gone: 1" in str(raised)
    finally:
        producer.close()
        operator.close()
