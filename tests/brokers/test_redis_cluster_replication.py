"""``wait_replicas`` on a Redis Cluster: each write script's ``WAIT`` goes to the master that ran it, on
the same connection, so the single server's guarantees hold per master (``test_redis_replication.py``
checks them on one master and replica; here the same behaviours on 3 masters with a replica each).

Replicas are frozen with SIGSTOP (all of them: whichever master serves a queue, its replica confirms
nothing) and resumed with SIGCONT before the next test. What a replica holds is read on the replica
itself (``READONLY``), key by key, without going through the broker.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import urlencode

import pytest
import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.errors import ReplicationTimeout
from conveyor.model import BrokerPolicy, Outcome, TaskRecord, TaskState
from conveyor.testing.redis_cluster import ClusterNode, LocalCluster
from conveyor.testing.sentinel import poll

from .test_redis_cluster import NOW, task

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=1) as built:
        yield built


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex


def _open(cluster: LocalCluster, namespace: str, **options: str) -> RedisBroker:
    return RedisBroker.from_url(f"{cluster.url}?{urlencode({'namespace': namespace, **options})}", BrokerPolicy())


@pytest.fixture
def waiting(cluster: LocalCluster, namespace: str) -> Iterator[RedisBroker]:
    """A broker whose writes wait for one replica, at most 300 ms."""
    broker = _open(cluster, namespace, wait_replicas="1", wait_timeout="300")
    yield broker
    broker.close()


@contextmanager
def replicas_stopped(cluster: LocalCluster) -> Iterator[None]:
    """Every replica frozen (SIGSTOP) for the block: they receive nothing and confirm nothing."""
    with ExitStack() as stack:
        for group in cluster.replicas_of:
            for replica in group:
                pid = replica.pid
                assert pid is not None
                os.kill(pid, signal.SIGSTOP)
                stack.callback(os.kill, pid, signal.SIGCONT)
        yield


def _contents(node: ClusterNode, namespace: str, replica: bool) -> dict[str, object]:
    """Every key of ``namespace`` on ``node`` with its value, read by type (``DUMP`` would differ
    between copies of one large hash: it serialises the table in its own order)."""
    client = redis.Redis(
        host="127.0.0.1", port=node.port, single_connection_client=True, socket_timeout=5, decode_responses=True
    )
    read = {
        "string": client.get,
        "hash": client.hgetall,
        "list": lambda key: client.lrange(key, 0, -1),
        "set": lambda key: sorted(client.smembers(key)),
        "zset": lambda key: client.zrange(key, 0, -1, withscores=True),
        "stream": lambda key: client.xrange(key),
    }
    try:
        if replica:
            client.execute_command("READONLY")  # type: ignore[no-untyped-call]
        keys = sorted(client.scan_iter(match=f"*{namespace}*", count=1000))
        return {key: read[str(client.type(key))](key) for key in keys}  # type: ignore[no-untyped-call]
    finally:
        client.close()


def mirrored(cluster: LocalCluster, namespace: str) -> bool:
    """True if every master's keys of ``namespace`` are on its replica, with the same values, now."""
    for master, (replica,) in zip(cluster.masters, cluster.replicas_of, strict=True):
        if _contents(master, namespace, replica=False) != _contents(replica, namespace, replica=True):
            return False
    return True


def _found(broker: RedisBroker, task_id: str) -> TaskRecord | None:
    return broker.get(task_id, NOW)


def test_a_cluster_url_may_ask_for_replicas(cluster: LocalCluster, namespace: str) -> None:
    broker = _open(cluster, namespace, wait_replicas="1")
    try:
        assert broker.config.wait_replicas == 1
        assert broker.enqueue([task("a")], NOW) == [None]
        assert broker.cluster
    finally:
        broker.close()


def test_an_acknowledged_enqueue_is_on_the_replica_when_it_returns(
    waiting: RedisBroker, cluster: LocalCluster, namespace: str
) -> None:
    for queue in ("q", "emails", "reports"):  # several queues: more than one master once queues have tags of their own
        assert waiting.enqueue([task(f"{queue}-a", queue)], NOW) == [None]
        assert waiting.enqueue([task(f"{queue}-b{i}", queue) for i in range(1200)], NOW) == [None] * 1200
        assert mirrored(cluster, namespace)  # read at once: each WAIT returned after the replica had it
    assert _found(waiting, "emails-b1199") is not None


def test_an_enqueue_no_replica_confirms_raises_and_is_withdrawn(
    waiting: RedisBroker, cluster: LocalCluster, namespace: str
) -> None:
    with replicas_stopped(cluster):
        with pytest.raises(ReplicationTimeout) as raised:
            waiting.enqueue([task("lost")], NOW)
        assert (raised.value.wanted, raised.value.acknowledged) == (1, 0)
        assert (raised.value.withdrawn, raised.value.started) == (("lost",), ())
        assert _found(waiting, "lost") is None
        assert waiting.claim(["q"], NOW, 30.0, limit=10) == []  # nothing left to run
    waiting.enqueue([task("after")], NOW)  # confirmed: the replica has replayed everything before it
    assert _found(waiting, "after") is not None
    assert mirrored(cluster, namespace)  # the replica got the task, then its withdrawal


def test_a_batch_withdraws_only_the_tasks_it_stored(waiting: RedisBroker, cluster: LocalCluster) -> None:
    waiting.enqueue([task("kept")], NOW)
    with replicas_stopped(cluster), pytest.raises(ReplicationTimeout) as raised:
        waiting.enqueue([task("kept"), task("x"), task("y")], NOW)
    assert raised.value.withdrawn == ("x", "y")
    assert _found(waiting, "kept") is not None  # the duplicate's existing task is not touched
    assert _found(waiting, "x") is None and _found(waiting, "y") is None


def test_a_task_a_worker_claimed_during_the_wait_is_reported_started_and_left_running(
    cluster: LocalCluster, namespace: str
) -> None:
    producer = _open(cluster, namespace, wait_replicas="1", wait_timeout="3000")
    worker = _open(cluster, namespace)
    claimed: list[TaskRecord] = []

    def claim_it() -> bool:
        claimed.extend(worker.claim(["q"], NOW, 30.0))
        return bool(claimed)

    claimer = threading.Thread(target=poll, args=(claim_it, 10.0, "the task to be claimed", 0.005))
    try:
        with replicas_stopped(cluster):
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


def test_other_writes_short_of_replicas_take_effect(waiting: RedisBroker, cluster: LocalCluster) -> None:
    waiting.enqueue([task("a")], NOW)
    with replicas_stopped(cluster):
        (claimed,) = waiting.claim(["q"], NOW, 30.0)
        outcome = Outcome("a", claimed.lease_token or "", "complete", result="1")
        assert waiting.settle([outcome], NOW) == [True]
    done = _found(waiting, "a")
    assert done is not None and done.state is TaskState.COMPLETED


def test_without_wait_replicas_writes_do_not_wait(cluster: LocalCluster, namespace: str) -> None:
    broker = _open(cluster, namespace)
    try:
        with replicas_stopped(cluster):
            assert broker.enqueue([task("a")], NOW) == [None]  # the replicas are frozen: no WAIT was sent
    finally:
        broker.close()
