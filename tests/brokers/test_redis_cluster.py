"""The Redis broker on a Redis Cluster: addressing, recognising a cluster node, routing, events.

The whole contract on a cluster is the conformance suite's job (its ``redis-cluster`` parameter); these
are what only a cluster has. They run on the session's private 3-master cluster (``redis_cluster``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from redis._parsers.base import BaseParser

from conveyor import Conveyor
from conveyor.brokers import open_broker
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.faults import NEEDED_ACL, translated
from conveyor.brokers.redis.keys import SLOTS, keyslot, partition_labels
from conveyor.errors import BrokerUnavailable, ConfigurationError
from conveyor.model import BrokerPolicy, Event, NewTask, Outcome, QueueSettings
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import free_port

pytestmark = pytest.mark.redis

NOW = 1_000_000.0


def task(task_id: str, queue: str = "q") -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")


def drain_one(broker: RedisBroker, task_id: str) -> None:
    """Enqueue, claim and complete one task; assert each step took."""
    assert broker.enqueue([task(task_id)], NOW) == [None]
    (claimed,) = broker.claim(["q"], NOW, 30.0)
    assert claimed.id == task_id
    assert broker.settle([Outcome(task_id, claimed.lease_token or "", "complete")], NOW) == [True]
    record = broker.get(task_id, NOW)
    assert record is not None and record.state == "completed"


def test_a_cluster_url_names_its_seed_nodes_and_keeps_the_options() -> None:
    config = RedisConfig.from_url(
        "redis+cluster://user:pw@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/?namespace=app&socket_timeout=3"
    )
    assert config.cluster and not config.tls
    assert config.seeds == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)]
    assert (config.namespace, config.socket_timeout) == ("app", 3.0)
    assert RedisConfig.from_url("rediss+cluster://h:7000?namespace=app&ssl_ca_certs=/ca.pem").tls
    assert not RedisConfig.from_url("redis://h:7000/0").cluster


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://h:7000/2", "database 0 only"),
        ("redis+cluster://h:7000/?db=1", "database 0 only"),
        ("redis+cluster://h:port/", "host:port"),
        ("redis+cluster://h:7000/?ssl_ca_certs=/ca.pem", "rediss+cluster://"),
        ("redis+shards://h:7000/", "redis+cluster://"),
    ],
)
def test_a_bad_cluster_url_is_a_configuration_error(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says.replace("+", r"\+")):
        RedisConfig.from_url(url)


def test_a_cluster_url_serves_the_contract(redis_cluster_url: str) -> None:
    broker = open_broker(redis_cluster_url)
    assert isinstance(broker, RedisBroker)
    try:
        drain_one(broker, "a")
        assert broker.cluster
    finally:
        broker.close()


def test_a_plain_url_naming_any_node_of_a_cluster_is_recognised_and_logged(
    redis_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = "t" + uuid.uuid4().hex
    for index, master in enumerate(redis_cluster.masters):  # only one of them owns the namespace's slot
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="conveyor.brokers.redis"):
            broker = RedisBroker.from_url(f"redis://127.0.0.1:{master.port}/0?namespace={namespace}", BrokerPolicy())
            try:
                drain_one(broker, f"task-{index}")
                assert broker.cluster
            finally:
                broker.close()
        assert any("is a node of a Redis Cluster" in record.getMessage() for record in caplog.records)


def test_a_plain_url_naming_a_database_of_a_cluster_node_says_why_it_is_refused(redis_cluster: LocalCluster) -> None:
    """It was a bare ``DB index is out of range`` at the first call."""
    node = redis_cluster.masters[0]
    broker = RedisBroker.from_url(f"redis://127.0.0.1:{node.port}/1?namespace=t{uuid.uuid4().hex}", BrokerPolicy())
    try:
        with pytest.raises(ConfigurationError, match="a Redis Cluster has database 0 only"):
            broker.enqueue([NewTask(id="x", name="n", queue="q", payload="[[], {}]")], 1.0)
    finally:
        broker.close()


def test_a_plain_server_keeps_the_plain_client(redis_url: str) -> None:
    broker = RedisBroker.from_url(redis_url, BrokerPolicy())
    try:
        drain_one(broker, "a")
        assert not broker.cluster
    finally:
        broker.close()


def _getkeys_calls(cluster: LocalCluster) -> int:
    total = 0
    for master in cluster.masters:
        stats = master.info("commandstats")
        entry = stats.get("cmdstat_command|getkeys", "")
        if entry:
            total += int(str(entry).split("calls=")[1].split(",")[0]) if "calls=" in str(entry) else 0
    return total


def test_operations_are_routed_by_their_key_without_asking_the_server(redis_cluster: LocalCluster) -> None:
    """redis-py asks ``COMMAND GETKEYS`` before each ``FCALL`` unless told where its key is: a round
    trip per call, carrying the whole call again."""
    broker = RedisBroker.from_url(redis_cluster.namespace_url(), BrokerPolicy())
    try:
        before = _getkeys_calls(redis_cluster)
        drain_one(broker, "a")
        broker.enqueue([task(f"b{i}") for i in range(20)], NOW)
        assert len(broker.claim(["q"], NOW, 30.0, limit=20)) == 20
        assert _getkeys_calls(redis_cluster) == before
    finally:
        broker.close()


def test_a_dead_seed_node_is_skipped(redis_cluster: LocalCluster) -> None:
    alive = redis_cluster.masters[1].port
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{alive}/?namespace=t{uuid.uuid4().hex}"
    broker = RedisBroker.from_url(url + "&socket_connect_timeout=0.5", BrokerPolicy())
    try:
        drain_one(broker, "a")
    finally:
        broker.close()


def test_the_server_clock_reads_a_node_that_answers_when_the_first_seed_is_down(
    redis_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """It read the URL's first node alone: a worker whose first seed was down logged a WARNING every
    5 s and never agreed with the servers' clock."""
    alive = redis_cluster.masters[1].port
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{alive}/?namespace=t{uuid.uuid4().hex}"
    broker = RedisBroker.from_url(url + "&socket_connect_timeout=0.5", BrokerPolicy())
    try:
        clock = broker.server_clock()  # before any call: the first seed is all it knows, and it is down
        drain_one(broker, "a")
        with caplog.at_level(logging.DEBUG, logger="conveyor.brokers.redis.clock"):
            clock.offset = 1e6  # a measurement that read nothing would keep it
            clock.sync()
        assert abs(clock.offset) < 60 and not caplog.records, caplog.text
    finally:
        broker.close()


def test_an_unreachable_cluster_is_broker_unavailable_quickly() -> None:
    url = f"redis+cluster://127.0.0.1:{free_port()}/?namespace=t&socket_connect_timeout=0.5&socket_timeout=1"
    broker = RedisBroker.from_url(url, BrokerPolicy())
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            broker.enqueue([task("a")], NOW)
        assert time.monotonic() - started < 5.0
    finally:
        broker.close()


def test_events_reach_a_broker_seeded_with_another_node(redis_cluster: LocalCluster) -> None:
    namespace = "t" + uuid.uuid4().hex
    urls = [f"redis+cluster://127.0.0.1:{m.port}/?namespace={namespace}" for m in redis_cluster.masters]
    producer = RedisBroker.from_url(urls[0], BrokerPolicy())
    listener = RedisBroker.from_url(urls[2], BrokerPolicy())
    seen: list[Event] = []
    lock = threading.Lock()

    def record(event: Event) -> None:
        with lock:
            seen.append(event)

    try:
        producer.configure_queue(QueueSettings("q"))  # registered: the listener follows its slot from the start
        listener.subscribe(record)
        prefix = listener.keys.queue_prefix("q")
        owner = redis_cluster.masters[owner_of_slot(redis_cluster, keyslot(prefix))]
        channel = listener.keys.slot(prefix).events
        assert owner.call("PUBSUB", "SHARDNUMSUB", channel) == [channel, 1]  # sharded, on the slot's node
        drain_one(producer, "e1")
        poll_until(lambda: len(seen) == 3)
        assert [(e.task_id, e.old_state, e.new_state) for e in seen] == [
            ("e1", None, "pending"),
            ("e1", "pending", "active"),
            ("e1", "active", "completed"),
        ]
    finally:
        producer.close()
        listener.close()


def test_a_cancel_of_a_running_task_is_announced_to_a_broker_seeded_with_another_node(
    redis_cluster: LocalCluster,
) -> None:
    namespace = "t" + uuid.uuid4().hex
    urls = [f"redis+cluster://127.0.0.1:{m.port}/?namespace={namespace}" for m in redis_cluster.masters]
    worker = RedisBroker.from_url(urls[1], BrokerPolicy())
    admin = RedisBroker.from_url(urls[2], BrokerPolicy())
    announced: list[str] = []
    try:
        worker.watch_cancels(announced.append)
        worker.enqueue([task("running")], NOW)
        assert [record.id for record in worker.claim(["q"], NOW, 30.0)] == ["running"]
        admin.cancel("running", NOW)
        poll_until(lambda: announced == ["running"])
    finally:
        worker.close()
        admin.close()


def test_keyslot_agrees_with_the_server(redis_cluster: LocalCluster) -> None:
    keys = ["foo", "{user1000}.following", "{}x", "a{b", "{conveyor}:v4:due", "{t|emails|2r}:v5:rows", "é{ü}"]
    keys += [f"key-{i}" for i in range(200)]
    node = redis_cluster.masters[0]
    assert [keyslot(key) for key in keys] == [int(node.call("CLUSTER", "KEYSLOT", key)) for key in keys]


@pytest.mark.parametrize("partitions", [2, 3, 6, 48])
def test_partition_labels_sit_in_evenly_spaced_slot_windows(partitions: int) -> None:
    labels = partition_labels("conveyor", "emails", partitions)
    assert len(set(labels)) == partitions
    windows = [keyslot("{conveyor|" + label + "}") * partitions // SLOTS for label in labels]
    assert windows == list(range(partitions))
    assert labels == partition_labels("conveyor", "emails", partitions)  # the same in every process


def test_six_partitions_put_two_on_each_of_three_masters(redis_cluster: LocalCluster) -> None:
    owners = [owner_of_slot(redis_cluster, keyslot("{t|" + label + "}")) for label in partition_labels("t", "q", 6)]
    assert sorted(owners) == [0, 0, 1, 1, 2, 2]


def owner_of_slot(cluster: LocalCluster, slot: int) -> int:
    count = len(cluster.masters)
    return next(i for i in range(count) if i * SLOTS // count <= slot < (i + 1) * SLOTS // count)


def test_an_acl_user_with_the_documented_permissions_runs_on_a_cluster(redis_cluster: LocalCluster) -> None:
    """``NEEDED_ACL`` (set on every node: a cluster's ACLs are per node) is enough for the cluster client
    to learn the topology, run the operations, listen to events and read the worker registry."""
    namespace = "t" + uuid.uuid4().hex
    user = "u" + uuid.uuid4().hex[:8]
    for node in redis_cluster.nodes:
        node.call("ACL", "SETUSER", user, "reset", "on", ">pw", *NEEDED_ACL.replace("NS", namespace).split())
    url = f"redis+cluster://{user}:pw@{redis_cluster.seeds}/?namespace={namespace}"
    producer = RedisBroker.from_url(url, BrokerPolicy())
    listener = RedisBroker.from_url(url, BrokerPolicy())
    seen: list[Event] = []
    try:
        producer.configure_queue(QueueSettings("q"))  # a queue slot apart from the namespace slot
        listener.subscribe(seen.append)
        drain_one(producer, "a")
        poll_until(lambda: len(seen) == 3)
        assert [queue.name for queue in producer.queues(NOW)] == ["q"]
        assert producer.workers(NOW) == []
    finally:
        producer.close()
        listener.close()
        for node in redis_cluster.nodes:
            node.call("ACL", "DELUSER", user)


def _blpops(cluster: LocalCluster) -> int:
    entries = [master.info("commandstats").get("cmdstat_blpop", "") for master in cluster.masters]
    return sum(int(str(entry).split("calls=")[1].split(",")[0]) for entry in entries if "calls=" in str(entry))


def test_a_running_worker_drains_and_wakes_on_a_cluster(redis_cluster: LocalCluster) -> None:
    """The runtime on the server clock: idle claims go as a blocking pop with the claim queued behind
    it, on the connection of the master serving the queue's slot."""
    app = Conveyor(redis_cluster.namespace_url())
    blpops = _blpops(redis_cluster)
    done: list[int] = []

    @app.task
    def record(n: int) -> None:
        done.append(n)

    worker = app.worker(concurrency=4, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        poll_until(lambda: worker.runtime is not None and worker.runtime.started.is_set())
        record.enqueue_many([((n,), {}) for n in range(300)])
        poll_until(lambda: len(done) == 300, timeout=30.0)
        record.enqueue(300)  # to a worker that found the queue empty
        poll_until(lambda: len(done) == 301)
        assert sorted(done) == list(range(301))
        assert _blpops(redis_cluster) > blpops
    finally:
        worker.stop()
        thread.join(timeout=10.0)
        app.close()
    assert not thread.is_alive()


@pytest.mark.parametrize(
    "reply",
    [
        "CLUSTERDOWN The cluster is down",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "MASTERDOWN Link down",
        "READONLY You can't write against a read only replica.",
    ],
)
def test_a_cluster_between_two_states_is_broker_unavailable(reply: str) -> None:
    """redis-py parses these replies into exceptions whose text lacks the code (a failover under way
    answered 'The cluster is down'): each is a passing state, so a caller backs off and retries."""
    exc = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
    assert isinstance(translated(exc), BrokerUnavailable), type(exc)
