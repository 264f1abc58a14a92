"""Events and cancel announcements with a slot per queue (issue 33, layout 5's listeners).

The brokers use the key names of ``test_redis_slots.SplitKeys``: every queue in a slot of its own,
``{ns|queue}:v5:``, so scripts publish on their queue slot's channels and read its ``listening`` key.
A listener must subscribe to every registered queue's channels (on a cluster, on the master serving
each) and pick up a queue another broker registered later at its next refresh (one the broker
registers itself, at once). The tests run on one server and on
the session's 3-master cluster, where the queues are chosen so their slots sit on different masters,
none of them the namespace slot's; the failover test builds a cluster with replicas of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.events import LISTENING_REFRESH
from conveyor.brokers.redis.keys import keyslot
from conveyor.errors import BrokerUnavailable
from conveyor.model import BrokerPolicy, Event, NewTask, Outcome, QueueSettings
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster

from .split import NOW, SplitKeys, task
from .test_redis_cluster import owner_of_slot

pytestmark = pytest.mark.redis


@dataclass
class Target:
    """A fresh namespace on one server or on the cluster, and the brokers opened on it (closed after)."""

    url: str
    cluster: LocalCluster | None
    opened: list[RedisBroker] = field(default_factory=list)

    def broker(self) -> RedisBroker:
        config = RedisConfig.from_url(self.url)
        broker = RedisBroker(config, BrokerPolicy(), keys=SplitKeys(config.namespace))
        self.opened.append(broker)
        return broker

    def master_of(self, key: str) -> int:
        """The index of the master serving ``key``'s slot (0 on one server)."""
        return 0 if self.cluster is None else owner_of_slot(self.cluster, keyslot(key))

    def queues_apart(self, count: int) -> list[str]:
        """``count`` queue names whose slots sit on as many masters, none the namespace slot's when the
        cluster has masters enough (on one server: any names)."""
        if self.cluster is None:
            return [f"q{n}" for n in range(count)]
        namespace = RedisConfig.from_url(self.url).namespace
        taken = {self.master_of("{" + namespace + "}")} if count < len(self.cluster.masters) else set()
        chosen = []
        for n in itertools.count():
            master = self.master_of("{" + namespace + f"|q{n}" + "}")
            if master not in taken:
                taken.add(master)
                chosen.append(f"q{n}")
                if len(chosen) == count:
                    return chosen
        raise AssertionError("unreachable")

    def subscribers(self, channel: str) -> int:
        """How many connections the master serving ``channel`` has subscribed to it."""
        node = self.opened[0].client if self.cluster is None else self.cluster.masters[self.master_of(channel)].client()
        try:
            reply = node.execute_command("PUBSUB", "SHARDNUMSUB", channel)  # type: ignore[no-untyped-call]
        finally:
            if self.cluster is not None:
                node.close()
        return int(reply[1])


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        made = Target(cluster.namespace_url(), cluster)
    else:
        made = Target(request.getfixturevalue("redis_url"), None)
    yield made
    for broker in made.opened:
        broker.close()


class Heard:
    """The events a broker's subscriber got, by queue."""

    def __init__(self, broker: RedisBroker) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []
        broker.subscribe(self._record)

    def _record(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, queue: str) -> list[tuple[str, str | None, str]]:
        with self._lock:
            return [(e.task_id, e.old_state, e.new_state) for e in self.events if e.queue == queue]


def test_events_of_queues_in_slots_on_two_masters_both_reach_a_listener(target: Target) -> None:
    producer, listener = target.broker(), target.broker()
    queues = target.queues_apart(2)
    for queue in queues:
        producer.configure_queue(QueueSettings(queue))
    heard = Heard(listener)
    for queue in queues:
        channel = listener.keys.slot(listener.keys.queue_prefix(queue)).events
        assert target.subscribers(channel) == 1, channel  # on the master serving the queue's slot
    if target.cluster is not None:
        assert len({target.master_of(listener.keys.queue_prefix(queue)) for queue in queues}) == 2
    for queue in queues:
        task_id = f"1~{queue}"
        assert producer.enqueue([task(task_id)], NOW) == [None]
        (claimed,) = producer.claim([queue], NOW, 30.0)
        assert producer.settle([Outcome(task_id, claimed.lease_token or "", "complete")], NOW) == [True]
    expected = {
        queue: [
            (f"1~{queue}", None, "pending"),
            (f"1~{queue}", "pending", "active"),
            (f"1~{queue}", "active", "completed"),
        ]
        for queue in queues
    }
    poll_until(
        lambda: {queue: heard.of(queue) for queue in queues} == expected,
        message=lambda: f"the events of both queues: { ({queue: heard.of(queue) for queue in queues}) }",
    )


def test_a_queue_registered_after_the_listener_started_is_heard_after_its_refresh(target: Target) -> None:
    producer, listener = target.broker(), target.broker()
    first, later = target.queues_apart(2)
    producer.configure_queue(QueueSettings(first))
    heard = Heard(listener)
    assert producer.enqueue([task(f"0~{later}")], NOW) == [None]  # registers the queue
    numbers = itertools.count(1)

    def heard_later() -> bool:  # a task more each time: until the refresh, no event is made for it
        assert producer.enqueue([task(f"{next(numbers)}~{later}")], NOW) == [None]
        return bool(heard.of(later))

    poll_until(heard_later, timeout=3 * LISTENING_REFRESH, interval=0.05, message=f"an event of {later}")
    channel = listener.keys.slot(listener.keys.queue_prefix(later)).events
    assert target.subscribers(channel) == 1


def test_a_queue_a_broker_registers_is_followed_by_its_own_listeners_before_the_enqueue_returns(
    target: Target,
) -> None:
    """Its first enqueue registers the queue: the broker's own listeners subscribe to the queue slot's
    channels (and the event listener sets its ``listening`` key) before the call returns, so another
    process's transitions of its tasks are heard at once, not from the next refresh on."""
    broker, worker = target.broker(), target.broker()
    heard = Heard(broker)
    cancels: list[str] = []
    broker.watch_cancels(cancels.append)
    (queue,) = target.queues_apart(1)
    slot = broker.keys.slot(broker.keys.queue_prefix(queue))
    assert broker.enqueue([task(f"1~{queue}")], NOW) == [None]
    assert [target.subscribers(slot.events), target.subscribers(slot.cancels)] == [1, 1]
    (claimed,) = worker.claim([queue], NOW, 30.0)  # another broker: its events come by pub/sub
    worker.cancel(claimed.id, NOW)
    expected = [(claimed.id, None, "pending"), (claimed.id, "pending", "active"), (claimed.id, "active", "archived")]
    poll_until(
        lambda: heard.of(queue) == expected and cancels == [claimed.id],
        timeout=LISTENING_REFRESH / 2,  # well before a refresh
        message=lambda: f"the worker's events and the cancel: {heard.of(queue)}, {cancels}",
    )


def test_the_channels_of_a_forgotten_queue_are_left_at_the_refresh(target: Target) -> None:
    producer, listener = target.broker(), target.broker()
    queues = target.queues_apart(2)
    for queue in queues:
        producer.configure_queue(QueueSettings(queue))
    kept, forgotten = (listener.keys.slot(listener.keys.queue_prefix(queue)) for queue in queues)
    Heard(listener)
    listener.watch_cancels(lambda task_id: None)
    channels = [kept.events, kept.cancels, forgotten.events, forgotten.cancels]
    assert [target.subscribers(channel) for channel in channels] == [1, 1, 1, 1]
    assert producer.forget_queue(queues[1]) == 0
    poll_until(
        lambda: [target.subscribers(channel) for channel in channels] == [1, 1, 0, 0],
        timeout=3 * LISTENING_REFRESH,
        interval=0.05,
        message="the forgotten queue's channels left, the other's kept",
    )


def test_a_cancel_of_a_running_task_reaches_the_worker_running_it(target: Target) -> None:
    """The task's queue slot on another master than the namespace's: its ``cancels`` channel is there.
    The heartbeat is too slow to matter, so a worker that stops the task learned of it by pub/sub."""
    (queue,) = target.queues_apart(1)
    worker_broker, admin = target.broker(), target.broker()
    worker_broker.configure_queue(QueueSettings(queue))
    app = Conveyor(broker=worker_broker)
    started, cancelled = threading.Event(), threading.Event()

    @app.task
    async def waits() -> None:  # returns only when cancelled
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    task_id = f"{uuid.uuid4().hex}~{queue}"  # through the broker: the app takes no "~" in a custom id
    new = NewTask(id=task_id, name=waits.name, queue=queue, payload='{"args": [], "kwargs": {}}')
    assert worker_broker.enqueue([new], app.now()) == [None]
    worker = app.worker([queue], lease_for=60.0, heartbeat_interval=10.0, poll_interval=0.02, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        assert started.wait(5)
        admin.cancel(task_id, app.now())
        poll_until(cancelled.is_set, timeout=2.0, message="CancelledError well before the next heartbeat")
    finally:
        worker.stop()
        thread.join(timeout=10.0)
    assert not thread.is_alive()


@pytest.mark.slow
def test_a_listener_hears_queues_on_two_masters_again_after_one_fails_over() -> None:
    """SIGKILL the master of one queue's slot: once its replica took over, the listener (which makes
    no other call) hears both queues again, the failed master's and the other's."""
    with LocalCluster(masters=3, replicas=1, node_timeout=1.0) as cluster:
        target = Target(f"{cluster.namespace_url()}&socket_connect_timeout=0.5&socket_timeout=1", cluster)
        try:
            producer, listener = target.broker(), target.broker()
            failing, other = target.queues_apart(2)
            owner = target.master_of(listener.keys.queue_prefix(failing))
            for queue in (failing, other):
                producer.configure_queue(QueueSettings(queue))
            heard = Heard(listener)
            assert producer.enqueue([task(f"0~{failing}"), task(f"0~{other}")], NOW) == [None, None]
            poll_until(lambda: heard.of(failing) and heard.of(other))
            cluster.masters[owner].kill()  # (what its replica may lack is re-made by the enqueues below)
            killed, numbers = time.monotonic(), itertools.count(1)

            def both_heard_again() -> bool:  # pub/sub is at-most-once: sent again until heard
                number = next(numbers)
                for queue in (failing, other):
                    try:
                        producer.enqueue([task(f"{number}~{queue}")], NOW)
                    except BrokerUnavailable:  # the failed master's slots, until its replica takes over
                        pass
                return all(len(heard.of(queue)) > 1 for queue in (failing, other))

            poll_until(both_heard_again, timeout=30.0, interval=0.1, message="both queues heard after the failover")
            logging.getLogger(__name__).info("both heard again %.2f s after the kill", time.monotonic() - killed)
        finally:
            for broker in target.opened:
                broker.close()
