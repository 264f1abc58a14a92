"""The Redis broker through a cluster's faults: a master failing over to its replica, and a busy
queue's slot (or the namespace's, where custom ids are indexed) moved to another master under load.
Each test builds a cluster of its own."""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable

import pytest

from conveyor import Conveyor, TaskState
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.cluster import MOVING_PATIENCE
from conveyor.brokers.redis.keys import keyslot, partition_labels
from conveyor.errors import BrokerUnavailable
from conveyor.model import BrokerPolicy, Event, Outcome, QueueInfo, QueueSettings
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster

from .test_redis_cluster import NOW, owner_of_slot, task

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_the_broker_carries_on_after_its_master_fails_over_to_its_replica() -> None:
    """SIGKILL the master holding the queue's slot: calls fail as BrokerUnavailable (never another error)
    until the replica takes over, then succeed again through the same broker object, with what
    had reached the replica; a broker that only listens subscribes again on the new master."""
    with LocalCluster(masters=3, replicas=1, node_timeout=1.0) as cluster:
        namespace = "t" + uuid.uuid4().hex
        url = f"{cluster.url}?namespace={namespace}&socket_connect_timeout=0.5&socket_timeout=1"
        broker = RedisBroker.from_url(url, BrokerPolicy())
        listener = RedisBroker.from_url(url, BrokerPolicy())  # only listens: nothing else refreshes its topology
        seen: list[Event] = []
        try:
            broker.configure_queue(QueueSettings("q"))  # registered: the listener follows its slot from the start
            listener.subscribe(seen.append)
            broker.enqueue([task(f"before-{i}") for i in range(50)], NOW)
            poll_until(lambda: len(seen) == 50)
            owner = owner_of_slot(cluster, keyslot(broker.keys.queue_prefix("q")))
            (replica,) = cluster.replicas_of[owner]
            poll_until(
                lambda: (
                    replica.info("replication").get("master_repl_offset")
                    == cluster.masters[owner].info("replication").get("master_repl_offset")
                )
            )
            cluster.masters[owner].kill()
            started = time.monotonic()
            unavailable = 0
            while True:
                try:
                    broker.enqueue([task("after")], NOW)
                    break
                except BrokerUnavailable:
                    unavailable += 1
                    assert time.monotonic() - started < 30.0, "no failover within 30 s"
            recovered = time.monotonic() - started
            assert replica.info("replication")["role"] == "master"
            claimed = broker.claim(["q"], NOW, 30.0, limit=100)
            assert sorted(record.id for record in claimed) == sorted([*(f"before-{i}" for i in range(50)), "after"])
            logging.getLogger(__name__).info(
                "recovered after %.2f s, %d calls refused meanwhile", recovered, unavailable
            )
            heard = 0  # pub/sub is at-most-once: events published before it subscribes again are missed

            def heard_again() -> bool:
                nonlocal heard
                heard += 1
                broker.enqueue([task(f"heard-{heard}")], NOW)
                try:  # a short look: the caller resends until one is heard
                    poll_until(lambda: any(event.task_id.startswith("heard") for event in seen), timeout=0.2)
                except AssertionError:
                    return False
                return True

            poll_until(heard_again, timeout=15.0)
        finally:
            broker.close()
            listener.close()


def test_an_idle_worker_waiting_on_every_master_carries_on_after_one_fails_over() -> None:
    """A worker waits on the slots of a queue's three partitions, one per master (``slotwaits.py``);
    SIGKILL one master mid-wait: the failed pop ends the wait, the broker reads the topology again,
    and once the replica took over a task in any partition wakes the worker within 1 s again."""
    with LocalCluster(masters=3, replicas=1, node_timeout=1.0) as cluster:
        url = f"{cluster.url}?namespace=t{uuid.uuid4().hex}&socket_connect_timeout=0.5&socket_timeout=2"
        app = Conveyor(broker=RedisBroker.from_url(url, BrokerPolicy()))
        app.task(name="job")(lambda n: n)
        app.configure_queue("hot", partitions=3)
        broker = app.broker
        assert isinstance(broker, RedisBroker)
        labels = partition_labels(broker.keys.namespace, "hot", 3)
        owner = owner_of_slot(cluster, keyslot(broker.keys.label_prefix(labels[0])))
        (replica,) = cluster.replicas_of[owner]
        worker = app.worker(queues=["hot"], poll_interval=5.0)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            poll_until(lambda: app.inspect.workers(), timeout=10.0, message="the worker's registration")

            def blocked() -> int:
                return sum(int(node.info("clients")["blocked_clients"]) for node in cluster.nodes if node.running)

            def done(task_id: str) -> bool:
                return app.get(task_id).state is TaskState.COMPLETED

            poll_until(lambda: blocked() == 3, timeout=10.0, message="a pop on every master")
            cluster.masters[owner].kill()
            started = time.monotonic()
            while True:  # until the replica took over (calls are refused meanwhile)
                try:
                    app.enqueue("job", [0], queue="hot", task_id=f"after~{labels[0]}")
                    break
                except BrokerUnavailable:
                    assert time.monotonic() - started < 30.0, "no failover within 30 s"
            assert replica.info("replication")["role"] == "master"
            poll_until(lambda: done(f"after~{labels[0]}"), timeout=30.0, message="the task after the failover")
            for n, label in enumerate(labels, start=1):
                poll_until(lambda: blocked() >= 1, timeout=10.0, message="the idle worker's wait")
                sent = time.monotonic()
                task_id = app.enqueue("job", [n], queue="hot", task_id=f"again-{n}~{label}").id
                poll_until(lambda: done(task_id), timeout=10.0, message=f"the task in {label}")  # noqa: B023
                assert time.monotonic() - sent < 1.0, f"a task in {label} ran {time.monotonic() - sent:.2f}s late"
        finally:
            worker.stop()
            thread.join(timeout=30.0)
            app.close()


#: Seconds between a slot's source and its target told of its new owner (well under MOVING_PATIENCE)
LIMBO = 0.3


@pytest.mark.parametrize(("moved_slot", "wait_replicas"), [("queue", 0), ("queue", 1), ("namespace", 0)])
def test_moving_a_busy_slot_under_load_loses_nothing_and_raises_nothing(moved_slot: str, wait_replicas: int) -> None:
    """The queue's slot (or the namespace's, which indexes the custom ids), moved as ``redis-cli
    --cluster reshard`` moves it (IMPORTING, MIGRATING, MIGRATE, then SETSLOT NODE everywhere), all its
    keys in one MIGRATE, while a producer-consumer loop runs: every task enqueued is completed once,
    and no call fails, not even while the source has let the slot go and the target has not taken it
    yet (``LIMBO`` seconds: calls wait, as for a migration's refusals). With ``wait_replicas`` (each
    master with a replica) the calls follow the ASK and MOVED replies themselves, their WAIT on the
    same connection."""
    with LocalCluster(masters=3, replicas=wait_replicas) as cluster:
        namespace = "t" + uuid.uuid4().hex
        slot = keyslot("{" + namespace + ("|q}" if moved_slot == "queue" else "}"))
        source = cluster.masters[owner_of_slot(cluster, slot)]
        target = next(master for master in cluster.masters if master is not source)
        url = f"{cluster.namespace_url(namespace)}&wait_replicas={wait_replicas}"
        broker = RedisBroker.from_url(url, BrokerPolicy())
        errors: list[BaseException] = []
        counts = {"enqueued": 0, "completed": 0}
        stop = threading.Event()

        def load() -> None:
            batch = 0
            while not stop.is_set():
                try:
                    broker.enqueue([task(f"t{batch}-{i}") for i in range(20)], NOW)
                    counts["enqueued"] += 20
                    batch += 1
                    claimed = broker.claim(["q"], NOW, 60.0, limit=15)
                    settled = broker.settle([Outcome(r.id, r.lease_token or "", "complete") for r in claimed], NOW)
                    counts["completed"] += sum(settled)
                except BaseException as exc:
                    errors.append(exc)

        thread = threading.Thread(target=load)

        read_queues: list[list[QueueInfo]] = []

        def read(what: Callable[[], object]) -> None:
            try:
                what()
            except BaseException as exc:
                errors.append(exc)

        def state() -> str:  # what the loop did and is doing, for a timeout's message
            frame = sys._current_frames().get(thread.ident or 0)
            doing = "".join(traceback.format_stack(frame)[-8:]) if frame is not None else "(ended)\n"
            return f"completions; at the timeout {counts}, {len(errors)} errors {errors[:3]!r}, the loop in\n{doing}"

        # A call waits out a slot between two states for up to MOVING_PATIENCE: twice that, on a busy host
        patience = 2 * MOVING_PATIENCE
        thread.start()
        try:
            poll_until(lambda: counts["completed"] > 500, timeout=patience, message=state)
            target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            moved = (
                0  # moved right after marking, as the tools do: while marked, a script that would create a key waits
            )
            while keys := source.call("CLUSTER", "GETKEYSINSLOT", slot, 100_000):
                source.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
            done = counts["completed"]
            # served by the target, asked
            poll_until(lambda: counts["completed"] > done + 500, timeout=patience, message=state)
            # The new owner told to the source first and to the target a moment later, as a tool's
            # calls to the nodes may come apart on a busy host: meanwhile each sends a call to the other
            source.call("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
            readers = [  # an operator's reads too, in the gap: a script's call, a pipeline
                threading.Thread(target=read, args=(lambda: read_queues.append(broker.queues(NOW)),)),
                threading.Thread(target=read, args=(lambda: broker.history(0, 1),)),
            ]
            for reader in readers:
                reader.start()
            time.sleep(LIMBO)  # the window held open (the loop makes ~200 calls in it), then closed
            for master in [target, *(master for master in cluster.masters if master not in (source, target))]:
                master.call("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
            for reader in readers:
                reader.join()
            done = counts["completed"]
            # and after the hand-over
            poll_until(lambda: counts["completed"] > done + 500, timeout=patience, message=state)
        finally:
            stop.set()
            thread.join()
        try:
            assert errors == []
            assert [queue.name for queue in read_queues[0]] == ["q"]
            assert moved >= {"queue": 6, "namespace": 2}[moved_slot]  # rows, indexes...; the registry and ids
            while claimed := broker.claim(["q"], NOW, 60.0, limit=500):
                counts["completed"] += sum(
                    broker.settle([Outcome(r.id, r.lease_token or "", "complete") for r in claimed], NOW)
                )
            assert counts["completed"] == counts["enqueued"]
            (queue,) = broker.queues(NOW)
            assert queue.counts["completed"] == counts["enqueued"]
            assert int(source.call("CLUSTER", "COUNTKEYSINSLOT", slot)) == 0
        finally:
            broker.close()


@pytest.mark.parametrize("moved_slot", ["queue", "namespace"])
def test_a_listener_follows_a_moved_slot_without_a_warning(moved_slot: str, caplog: pytest.LogCaptureFixture) -> None:
    """A broker that listens (events) while the queue's slot (or the namespace's) moves to another
    master, as a reshard moves it (the target told first): the listener subscribes on the new owner
    and hears events again, and logs nothing at WARNING or above (a reshard is routine; the node it
    listened on is not lost)."""
    with LocalCluster(masters=3) as cluster:
        namespace = "t" + uuid.uuid4().hex
        broker = RedisBroker.from_url(cluster.namespace_url(namespace), BrokerPolicy())
        listener = RedisBroker.from_url(cluster.namespace_url(namespace), BrokerPolicy())
        seen: list[Event] = []
        try:
            broker.configure_queue(QueueSettings("q"))
            listener.subscribe(seen.append)
            broker.enqueue([task("before")], NOW)
            poll_until(lambda: [event.task_id for event in seen] == ["before"], message="the first event")
            slot = keyslot("{" + namespace + ("|q}" if moved_slot == "queue" else "}"))
            source = cluster.masters[owner_of_slot(cluster, slot)]
            target = next(master for master in cluster.masters if master is not source)
            with caplog.at_level(logging.WARNING, logger="conveyor"):
                target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
                source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
                while keys := source.call("CLUSTER", "GETKEYSINSLOT", slot, 100_000):
                    source.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                for master in [target, *(master for master in cluster.masters if master is not target)]:
                    master.call("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
                heard = 0

                def heard_again() -> bool:
                    nonlocal heard
                    heard += 1
                    broker.enqueue([task(f"after-{heard}")], NOW)
                    try:  # a short look: the caller sends another until one is heard
                        poll_until(lambda: any(event.task_id.startswith("after") for event in seen), timeout=0.2)
                    except AssertionError:
                        return False
                    return True

                poll_until(heard_again, timeout=10.0, message="an event after the move")
            assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
        finally:
            broker.close()
            listener.close()
