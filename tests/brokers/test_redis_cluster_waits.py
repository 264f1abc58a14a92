"""On a cluster an idle consumer blocks on every slot of its queues at once (``slotwaits.py``): a task
arriving in any of them wakes it at once, the pops it leaves behind take no later token, its
connections go back to the broker's stacks, and a stopping worker's wait ends at once.

Every wait is given 5 s: the wait before this one named the queue's own slot rather than its
partitions' (which an enqueue into a partition does not push to) and blocked on one slot after
another, half the timeout each here: a task in a partition woke it when the wait ran out, one in the
other queue up to 2.5 s late (median 4.5 s over the four slots).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.brokers.redis.keys import Keys5, keyslot, partition_labels, queue_label
from conveyor.brokers.redis.slotwaits import MOST_SLOTS
from conveyor.model import BrokerPolicy, NewTask, QueueSettings
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster

from .split import blocked_pops

TIMEOUT = 5.0
#: Woken later than this, the wait was not on the task's slot (or the host stalled for that long).
BOUND = 1.0
QUEUES = ["hot", "cold"]


@pytest.fixture
def broker(redis_cluster_url: str) -> Iterator[RedisBroker]:
    config = RedisConfig.from_url(redis_cluster_url)
    made = RedisBroker(config, BrokerPolicy(), keys=Keys5(config.namespace))
    made.configure_queue(QueueSettings("hot", partitions=3))
    yield made
    made.close()


def labels(broker: RedisBroker) -> list[str]:
    """The label of every slot of :data:`QUEUES`: hot's three partitions, then cold's one."""
    return [*partition_labels(broker.keys.namespace, queue_label("hot"), 3), queue_label("cold")]


def enqueue_into(broker: RedisBroker, label: str) -> str:
    task_id = f"{uuid.uuid4().hex}~{label}"
    queue = "cold" if label == queue_label("cold") else "hot"
    assert broker.enqueue([NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")], time.time()) == [None]
    return task_id


def waiting(
    broker: RedisBroker, result: list[tuple[bool, float]], watch: RedisBroker | None = None
) -> threading.Thread:
    """A thread in ``wait_for_work(QUEUES, TIMEOUT)``, once a pop is blocked on each slot (as
    ``watch``, by default ``broker``, sees: it must be allowed ``INFO``)."""
    watch = watch or broker
    base = blocked_pops(watch)
    thread = threading.Thread(target=lambda: result.append((broker.wait_for_work(QUEUES, TIMEOUT), time.monotonic())))
    thread.start()
    count = len(labels(broker))
    poll_until(lambda: blocked_pops(watch) >= base + count, timeout=TIMEOUT / 2, message="a pop on every slot")
    return thread


def test_the_slots_waited_on_are_on_every_master(broker: RedisBroker) -> None:
    """(What the tests below rely on: the queues' slots are served by the three masters.)"""
    assert isinstance(broker.client, RedisCluster)
    manager = broker.client.nodes_manager
    prefixes = [broker.keys.label_prefix(label) for label in labels(broker)]
    assert len({manager.get_node_from_slot(keyslot(prefix + "wake")).name for prefix in prefixes}) == 3


def test_an_idle_consumer_wakes_at_once_for_a_task_in_any_of_its_slots(broker: RedisBroker) -> None:
    for label in labels(broker):
        result: list[tuple[bool, float]] = []
        thread = waiting(broker, result)
        sent = time.monotonic()
        enqueue_into(broker, label)
        thread.join(TIMEOUT + 1.0)
        woke, at = result[0]
        assert woke
        assert at - sent < BOUND, f"a task in {label} woke the waiter {at - sent:.3f}s after it was enqueued"
        assert len(broker.claim(QUEUES, time.time(), 30.0, 10)) == 1


def test_a_wait_that_woke_leaves_no_pop_to_take_a_later_token(broker: RedisBroker) -> None:
    base = blocked_pops(broker)
    first, *others = labels(broker)
    result: list[tuple[bool, float]] = []
    thread = waiting(broker, result)
    enqueue_into(broker, first)
    thread.join(TIMEOUT + 1.0)
    assert result[0][0]
    poll_until(lambda: blocked_pops(broker) == base, timeout=1.0, message="every pop ended")
    for label in others:
        enqueue_into(broker, label)
    for label in others:  # each token still in its list, for the next waiter
        assert broker.client.llen(broker.keys.label_prefix(label) + "wake") == 1


def test_waits_that_woke_or_timed_out_hold_no_connection_after(broker: RedisBroker) -> None:
    """Connections go back to the broker's stacks (ended pops read or closed), so the count on the
    masters stays what one wait needed, however many waits come after."""
    assert not broker.wait_for_work(QUEUES, 0.2)  # nothing there: every pop timed out
    for label in labels(broker):  # a warm-up: every stack holds what a wait and a call need
        enqueue_into(broker, label)
        assert broker.wait_for_work(QUEUES, TIMEOUT)
        broker.claim(QUEUES, time.time(), 30.0, 10)
    before = connected(broker)
    started = time.monotonic()
    assert not broker.wait_for_work(QUEUES, 0.3)
    assert 0.3 <= time.monotonic() - started < 0.3 + BOUND
    for turn in range(20):
        enqueue_into(broker, labels(broker)[turn % 4])
        assert broker.wait_for_work(QUEUES, TIMEOUT)
        assert len(broker.claim(QUEUES, time.time(), 30.0, 10)) == 1
    assert connected(broker) <= before
    assert blocked_pops(broker) == 0


def test_the_pops_a_wait_leaves_are_unblocked_not_closed(broker: RedisBroker) -> None:
    """Closing them would make every wake-up reconnect all but one of them (and leave sockets in
    TIME_WAIT on the host): no connection is made across waits once the stacks are warm."""
    for label in labels(broker):
        enqueue_into(broker, label)
        assert broker.wait_for_work(QUEUES, TIMEOUT)
        broker.claim(QUEUES, time.time(), 30.0, 10)
    before = received(broker)
    for turn in range(20):
        enqueue_into(broker, labels(broker)[turn % 4])
        assert broker.wait_for_work(QUEUES, TIMEOUT)
        broker.claim(QUEUES, time.time(), 30.0, 10)
    assert received(broker) == before


@pytest.fixture
def acl_broker(redis_cluster: LocalCluster, broker: RedisBroker) -> Iterator[RedisBroker]:
    """A broker on ``broker``'s namespace whose ACL user has what ``NEEDED_ACL`` grants: no ``CLIENT
    UNBLOCK``, no ``INFO`` (``broker`` looks on)."""
    namespace, user = broker.keys.namespace, "u" + uuid.uuid4().hex
    rules = NEEDED_ACL.replace("NS", namespace).split()
    for node in redis_cluster.masters:
        node.call("ACL", "SETUSER", user, "reset", "on", ">pw", *rules)
    config = RedisConfig.from_url(f"redis+cluster://{user}:pw@{redis_cluster.seeds}/?namespace={namespace}")
    made = RedisBroker(config, BrokerPolicy(), keys=Keys5(namespace))
    yield made
    made.close()
    for node in redis_cluster.masters:
        node.call("ACL", "DELUSER", user)


def test_where_the_acl_forbids_client_unblock_the_pops_left_are_closed(
    acl_broker: RedisBroker, broker: RedisBroker
) -> None:
    base = blocked_pops(broker)
    first, *others = labels(broker)
    for _ in range(2):  # the first learns that CLIENT UNBLOCK is refused, the second does not try
        result: list[tuple[bool, float]] = []
        thread = waiting(acl_broker, result, watch=broker)
        sent = time.monotonic()
        enqueue_into(broker, first)
        thread.join(TIMEOUT + 1.0)
        assert result[0][0]
        assert result[0][1] - sent < BOUND
        poll_until(lambda: blocked_pops(broker) == base, timeout=1.0, message="every pop ended")
        for label in others:
            enqueue_into(broker, label)
        for label in others:
            assert broker.client.llen(broker.keys.label_prefix(label) + "wake") == 1
        assert len(acl_broker.claim(QUEUES, time.time(), 30.0, 10)) == 4
        broker.client.delete(*(broker.keys.label_prefix(label) + "wake" for label in others))
    assert not acl_broker._slot_waits._unblocks  # (the path meant: refused, then not tried again)


def test_a_wait_blocks_on_at_most_64_slots_and_the_next_on_the_others(broker: RedisBroker) -> None:
    """A connection per slot waited on: a queue of more partitions is waited on :data:`MOST_SLOTS` at
    a time (the slots in order, ``_slots_of``), the next wait taking the next ones."""
    count = MOST_SLOTS + 6
    broker.configure_queue(QueueSettings("wide", partitions=count))
    by_slot = sorted(partition_labels(broker.keys.namespace, queue_label("wide"), count), key=broker.keys.label_prefix)
    base = blocked_pops(broker)

    def wait(into: list[bool]) -> None:
        into.append(broker.wait_for_work(["wide"], TIMEOUT))

    for label in (by_slot[0], by_slot[-1]):  # in the first wait's window, then only in the second's
        result: list[bool] = []
        thread = threading.Thread(target=wait, args=(result,))
        thread.start()
        poll_until(lambda: blocked_pops(broker) >= base + MOST_SLOTS, timeout=TIMEOUT / 2, message="the pops")
        assert blocked_pops(broker) == base + MOST_SLOTS
        sent = time.monotonic()
        task_id = f"{uuid.uuid4().hex}~{label}"
        assert broker.enqueue([NewTask(id=task_id, name="job", queue="wide", payload="[[], {}]")], time.time()) == [
            None
        ]
        thread.join(TIMEOUT + 1.0)
        assert result == [True]
        assert time.monotonic() - sent < BOUND
        assert [record.id for record in broker.claim(["wide"], time.time(), 30.0, 10)] == [task_id]


def test_a_stopping_worker_ends_its_wait_on_every_slot_at_once(redis_cluster_url: str) -> None:
    """(``InterruptsWaits``, ``test_redis_interrupts.py``: a 30 s wait ends at the stop.)"""
    app = Conveyor(broker=RedisBroker(RedisConfig.from_url(redis_cluster_url + "&socket_timeout=60")))
    app.configure_queue("hot", partitions=3)
    app.task(name="job")(lambda: None)
    assert isinstance(app.broker, RedisBroker)
    broker = app.broker
    base = blocked_pops(broker)
    worker = app.worker(queues=QUEUES, poll_interval=30.0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        poll_until(lambda: blocked_pops(broker) >= base + 4, timeout=10.0, message="the worker waiting on every slot")
        started = time.monotonic()
        worker.stop()
        thread.join(timeout=30.0)
        assert time.monotonic() - started < 5 * BOUND  # (its wait would have lasted 30 s)
        poll_until(lambda: blocked_pops(broker) == base, timeout=1.0, message="every pop ended")
    finally:
        worker.stop()
        thread.join(timeout=30.0)
        app.close()


def connected(broker: RedisBroker) -> int:
    """Clients connected to the cluster's masters."""
    client = broker.client
    assert isinstance(client, RedisCluster)
    return sum(
        int(client.get_redis_connection(node).info("clients")["connected_clients"]) for node in client.get_primaries()
    )


def received(broker: RedisBroker) -> int:
    """Connections the cluster's masters accepted so far."""
    client = broker.client
    assert isinstance(client, RedisCluster)
    return sum(
        int(client.get_redis_connection(node).info("stats")["total_connections_received"])
        for node in client.get_primaries()
    )
