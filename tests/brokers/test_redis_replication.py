"""``wait_replicas``: writes confirmed by replicas (``WAIT``), on a real master and replica.

The replica is stopped with SIGSTOP to make ``WAIT`` time out (the master keeps its link: nothing is
disconnected within the test), and resumed with SIGCONT before the next test.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlencode

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.errors import ConfigurationError, ReplicationTimeout
from conveyor.model import BrokerPolicy, Outcome, TaskRecord, TaskState
from conveyor.testing.redis_server import RedisServer
from conveyor.testing.sentinel import ReplicaSet, poll

from .test_redis import task

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NOW = 1_000_000.0


@pytest.fixture(scope="module")
def replica_set() -> Iterator[ReplicaSet]:
    with ReplicaSet(replicas=1) as servers:
        yield servers


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    return "t" + str(abs(hash(request.node.nodeid)))


def _open(server: RedisServer, namespace: str, **options: str) -> RedisBroker:
    return RedisBroker.from_url(f"{server.url}?{urlencode({'namespace': namespace, **options})}", BrokerPolicy())


@pytest.fixture
def waiting(replica_set: ReplicaSet, namespace: str) -> Iterator[RedisBroker]:
    """A broker whose writes wait for the one replica, at most 300 ms."""
    broker = _open(replica_set.master, namespace, wait_replicas="1", wait_timeout="300")
    yield broker
    broker.close()


@pytest.fixture
def on_replica(replica_set: ReplicaSet, namespace: str) -> Iterator[RedisBroker]:
    """The same namespace read on the replica."""
    broker = _open(replica_set.replicas[0], namespace)
    yield broker
    broker.close()


@contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    """``server`` frozen (SIGSTOP) for the block: it receives nothing and confirms nothing."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


def _found(broker: RedisBroker, task_id: str) -> TaskRecord | None:
    return broker.get(task_id, NOW)


def test_an_acknowledged_enqueue_is_on_the_replica_when_it_returns(
    waiting: RedisBroker, on_replica: RedisBroker
) -> None:
    assert waiting.enqueue([task("a")], NOW) == [None]
    assert waiting.enqueue([task(f"b{i}") for i in range(1200)], NOW) == [None] * 1200  # three chunks
    assert _found(on_replica, "a") is not None  # read at once: WAIT returned after the replica had it
    assert all(_found(on_replica, f"b{i}") is not None for i in range(1200))


def test_an_enqueue_no_replica_confirms_raises_and_is_withdrawn(
    waiting: RedisBroker, on_replica: RedisBroker, replica_set: ReplicaSet
) -> None:
    with stopped(replica_set.replicas[0]):
        with pytest.raises(ReplicationTimeout) as raised:
            waiting.enqueue([task("lost")], NOW)
        assert (raised.value.wanted, raised.value.acknowledged) == (1, 0)
        assert (raised.value.withdrawn, raised.value.started) == (("lost",), ())
        assert _found(waiting, "lost") is None
        assert waiting.claim(["q"], NOW, 30.0, limit=10) == []  # nothing left to run
    waiting.enqueue([task("after")], NOW)  # confirmed: the replica has replayed everything before it
    assert _found(on_replica, "after") is not None
    assert _found(on_replica, "lost") is None  # it got the task, then its withdrawal


def test_a_batch_withdraws_only_the_tasks_it_stored(waiting: RedisBroker, replica_set: ReplicaSet) -> None:
    waiting.enqueue([task("kept")], NOW)
    with stopped(replica_set.replicas[0]), pytest.raises(ReplicationTimeout) as raised:
        waiting.enqueue([task("kept"), task("x"), task("y")], NOW)
    assert raised.value.withdrawn == ("x", "y")
    assert _found(waiting, "kept") is not None  # the duplicate's existing task is not touched
    assert _found(waiting, "x") is None and _found(waiting, "y") is None


def test_a_task_a_worker_claimed_during_the_wait_is_reported_started_and_left_running(
    replica_set: ReplicaSet, namespace: str
) -> None:
    producer = _open(replica_set.master, namespace, wait_replicas="1", wait_timeout="3000")
    worker = _open(replica_set.master, namespace)
    claimed: list[TaskRecord] = []

    def claim_it() -> bool:
        claimed.extend(worker.claim(["q"], NOW, 30.0))
        return bool(claimed)

    claimer = threading.Thread(target=poll, args=(claim_it, 10.0, "the task to be claimed", 0.005))
    try:
        with stopped(replica_set.replicas[0]):
            claimer.start()
            with pytest.raises(ReplicationTimeout) as raised:
                producer.enqueue([task("raced")], NOW)
            claimer.join()
        assert (raised.value.withdrawn, raised.value.started) == ((), ("raced",))
        record = _found(worker, "raced")
        assert record is not None and record.state is TaskState.ACTIVE
        assert [task.id for task in claimed] == ["raced"]
    finally:
        claimer.join()
        producer.close()
        worker.close()


def test_other_writes_short_of_replicas_are_logged_and_take_effect(
    waiting: RedisBroker, replica_set: ReplicaSet, caplog: pytest.LogCaptureFixture
) -> None:
    waiting.enqueue([task("a")], NOW)
    with stopped(replica_set.replicas[0]), caplog.at_level(logging.DEBUG, "conveyor.brokers.redis.replication"):
        (claimed,) = waiting.claim(["q"], NOW, 30.0)
        outcome = Outcome("a", claimed.lease_token or "", "complete", result="1")
        assert waiting.settle([outcome], NOW) == [True]
    done = _found(waiting, "a")
    assert done is not None and done.state is TaskState.COMPLETED
    logged = [(record.levelno, record.getMessage().partition(" ")[0]) for record in caplog.records]
    assert logged == [(logging.WARNING, "claim"), (logging.DEBUG, "settle")]  # one warning a minute, at most


def test_without_wait_replicas_writes_do_not_wait(replica_set: ReplicaSet, namespace: str) -> None:
    broker = _open(replica_set.master, namespace)
    try:
        with stopped(replica_set.replicas[0]):
            assert broker.enqueue([task("a")], NOW) == [None]  # the replica is frozen: no WAIT was sent
    finally:
        broker.close()


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
        broker = _open(replica_set.master, namespace, wait_replicas=wanted)
        try:
            [replicas] = [finding for finding in broker.preflight() if finding.name == "replicas"]
            assert (replicas.ok, replicas.detail.partition(",")[0]) == (ok, "1 connected")
        finally:
            broker.close()
    broker = _open(replica_set.master, namespace)
    try:
        assert "replicas" not in [finding.name for finding in broker.preflight()]  # not asked for: not checked
    finally:
        broker.close()
