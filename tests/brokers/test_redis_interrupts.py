"""``InterruptsWaits`` on Redis, on one server and on a 3-master cluster: an interrupt ends an idle
wait at once (a token pushed to the ``halt`` list its pop names, ``waits.py``), a task arriving around
it is claimed or stays pending, and the connections serve the calls after it.

Each wait here may block :data:`WAIT` seconds (the URL's ``socket_timeout`` lets its pop be that long);
one that ends within :data:`PROMPT` of the interrupt was ended by it. The queues' four slots (a queue of
three partitions and another queue) are one ``BLPOP`` on one server and one per slot on the cluster,
one slot on each master and one more.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.faults import NEEDED_ACL
from conveyor.brokers.redis.keys import partition_labels, queue_label
from conveyor.model import BrokerPolicy, NewTask, QueueSettings, TaskRecord
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .split import blocked_pops

#: What a wait here may last: far longer than any wake-up, so a wait that ended early was woken.
WAIT = 30.0
#: An interrupted wait ends within this (generous: a loaded host; the wait would last :data:`WAIT`).
PROMPT = 5.0
QUEUES = ["hot", "cold"]

Wait = Callable[[RedisBroker], Any]


def waits_for_work(broker: RedisBroker) -> bool:
    return broker.wait_for_work(QUEUES, WAIT)


def claims_after_wait(broker: RedisBroker) -> list[TaskRecord]:
    """The worker's idle call: on one server the pop and the claim in one write."""
    return broker.claim_after_wait(QUEUES, broker.server_clock(), 30.0, 10, WAIT)


WAITS = {"wait_for_work": waits_for_work, "claim_after_wait": claims_after_wait}


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def url(request: pytest.FixtureRequest) -> str:
    """A fresh namespace on the session's server, or its 3-master cluster; pops of up to 59 s."""
    base = str(request.getfixturevalue("redis_url" if request.param == "server" else "redis_cluster_url"))
    return base + "&socket_timeout=60"


def open_broker(url: str, configure: bool = True) -> RedisBroker:
    broker = RedisBroker(RedisConfig.from_url(url), BrokerPolicy())
    if configure:
        broker.configure_queue(QueueSettings("hot", partitions=3))
    return broker


@pytest.fixture
def broker(url: str) -> Iterator[RedisBroker]:
    made = open_broker(url)
    yield made
    made.close()


def pops_per_wait(broker: RedisBroker) -> int:
    return 4 if isinstance(broker.client, RedisCluster) else 1


class Waiter:
    """A claim, then ``wait(broker)``, on a thread of its own (as a fetcher's), started once its pops are
    blocked (as ``watch`` sees)."""

    def __init__(self, wait: Wait, broker: RedisBroker, watch: RedisBroker) -> None:
        self.result: list[Any] = []
        base = blocked_pops(watch)
        self.thread = threading.Thread(target=self._run, args=(wait, broker))
        self.thread.start()
        count = pops_per_wait(watch)
        poll_until(lambda: blocked_pops(watch) >= base + count, timeout=PROMPT, message="the wait's pops blocked")

    def _run(self, wait: Wait, broker: RedisBroker) -> None:
        assert broker.claim(QUEUES, time.time(), 30.0, 10) == []
        self.result.append(wait(broker))

    def ended(self, message: str) -> Any:
        poll_until(lambda: not self.thread.is_alive(), timeout=PROMPT, message=message)
        return self.result[0]


def enqueue(broker: RedisBroker, queue: str = "cold") -> str:
    task_id = uuid.uuid4().hex
    assert broker.enqueue([NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")], time.time()) == [None]
    return task_id


def push_after(gate: threading.Barrier, broker: RedisBroker, queue: str, ids: list[str]) -> None:
    gate.wait()
    ids.append(enqueue(broker, queue))


@pytest.mark.parametrize("name", WAITS)
def test_an_interrupt_ends_an_idle_wait_at_once(broker: RedisBroker, name: str) -> None:
    base = blocked_pops(broker)
    waiter = Waiter(WAITS[name], broker, broker)
    broker.interrupt_waits()
    result = waiter.ended("the interrupted wait to end")
    assert result == (True if name == "wait_for_work" else [])
    poll_until(lambda: blocked_pops(broker) == base, timeout=PROMPT, message="no pop left blocked")


@pytest.mark.parametrize("first", ["enqueue", "interrupt", "together"])
def test_a_task_arriving_around_an_interrupt_is_claimed_or_stays_pending(broker: RedisBroker, first: str) -> None:
    """Whichever comes first, the task is in the interrupted claim's reply or taken by the next claim:
    never claimed by a reply nobody read (it would wait for its lease to expire)."""
    for round_number in range(6):
        queue = "hot" if round_number % 2 else "cold"
        waiter = Waiter(claims_after_wait, broker, broker)
        ids: list[str] = []
        if first == "together":
            gate = threading.Barrier(2)
            pusher = threading.Thread(target=push_after, args=(gate, broker, queue, ids))
            pusher.start()
            gate.wait()
            broker.interrupt_waits()
            pusher.join()
        elif first == "enqueue":
            ids.append(enqueue(broker, queue))
            broker.interrupt_waits()
        else:
            broker.interrupt_waits()
            ids.append(enqueue(broker, queue))
        claimed = [record.id for record in waiter.ended("the interrupted claim to return")]
        after = [record.id for record in broker.claim(QUEUES, time.time(), 30.0, 10)]
        assert sorted(claimed + after) == ids, f"round {round_number}: claimed {claimed}, then {after}"
        broker.wait_for_work(QUEUES, 0.05)  # takes the wake-up token an enqueue after the pop left


def test_the_connections_serve_the_calls_after_an_interrupt(broker: RedisBroker) -> None:
    """Interrupted pops end with their replies read on their own connections: the next waits wake on a
    token in any slot and time out as before, nothing stays blocked, and an interrupted wait closes no
    connection (none is made again). (A wait woken by a task may make one: its pops' connections, the
    enqueue's and the one that unblocks the pops left can all be out at once on one master.)"""
    base = blocked_pops(broker)
    labels = [*partition_labels(broker.keys.namespace, queue_label("hot"), 3), queue_label("cold")]
    made = 0
    for round_number, label in enumerate(labels * 2):  # the first pass a warm-up of the stacks
        before = received(broker)
        waiter = Waiter(waits_for_work, broker, broker)
        broker.interrupt_waits()
        assert waiter.ended("the interrupted wait to end") is True
        if round_number >= len(labels):
            made += received(broker) - before
        waiter = Waiter(waits_for_work, broker, broker)
        task_id = f"{uuid.uuid4().hex}~{label}"
        queue = "cold" if label == queue_label("cold") else "hot"
        assert broker.enqueue([NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")], time.time()) == [None]
        assert waiter.ended("the wait to wake on a task") is True
        assert [record.id for record in broker.claim(QUEUES, time.time(), 30.0, 10)] == [task_id]
    started = time.monotonic()
    assert not broker.wait_for_work(QUEUES, 0.3)  # no halt token left to wake it
    assert time.monotonic() - started >= 0.25
    assert blocked_pops(broker) == base
    assert made == 0


def test_an_acl_user_without_client_commands_is_interrupted(request: pytest.FixtureRequest, url: str) -> None:
    """The interrupt is a push to a list of the namespace: what ``NEEDED_ACL`` grants (no ``CLIENT``)."""
    watch = open_broker(url)
    namespace, user = watch.keys.namespace, "u" + uuid.uuid4().hex
    nodes = masters(request, watch)
    for call in nodes:
        call("ACL", "SETUSER", user, "reset", "on", ">pw", *NEEDED_ACL.replace("NS", namespace).split())
    scheme, _, rest = url.partition("://")
    limited = open_broker(f"{scheme}://{user}:pw@{rest}", configure=False)
    try:
        base = blocked_pops(watch)
        waiter = Waiter(claims_after_wait, limited, watch)
        limited.interrupt_waits()
        assert waiter.ended("the interrupted wait to end") == []
        poll_until(lambda: blocked_pops(watch) == base, timeout=PROMPT, message="no pop left blocked")
        waiter = Waiter(claims_after_wait, limited, watch)  # and the next wait still wakes on a task
        task_id = enqueue(watch)
        assert [record.id for record in waiter.ended("the wait to claim the task")] == [task_id]
    finally:
        limited.close()
        watch.close()
        for call in nodes:
            call("ACL", "DELUSER", user)


def masters(request: pytest.FixtureRequest, broker: RedisBroker) -> list[Callable[..., Any]]:
    """A way to send a command to each master (one server: itself) as the default user."""
    if isinstance(broker.client, RedisCluster):
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return [node.call for node in cluster.masters]
    server: RedisServer = request.getfixturevalue("redis_server")

    def call(*args: str) -> Any:
        client = server.client()
        try:
            return client.execute_command(*args)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    return [call]


def received(broker: RedisBroker) -> int:
    """Connections the server (or the cluster's masters) accepted so far."""
    client = broker.client
    if not isinstance(client, RedisCluster):
        return int(client.info("stats")["total_connections_received"])
    return sum(
        int(client.get_redis_connection(node).info("stats")["total_connections_received"])
        for node in client.get_primaries()
    )
