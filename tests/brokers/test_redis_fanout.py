"""An enqueue over several queue slots (a partitioned queue's partitions, or queues of slots of their
own; ``fanout.py``): on one server one script call per chunk (``joined()`` in ``enqueue.lua``), on
the 3-master cluster the slots' calls sent at once, each storing and refusing what the calls of one
slot after another did: the same tasks, numbers and answers."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.connection import AbstractConnection

from conveyor.brokers.redis import RedisBroker, fanout, spread
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.connections import Command, Connections
from conveyor.errors import QueueFull
from conveyor.model import NewTask, QueueSettings, TaskState
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .resent import cut_once
from .split import NOW


@pytest.fixture(params=["server", "cluster"])
def broker(request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    """A broker on the session's server, or a fresh namespace on its 3-master cluster."""
    if request.param == "cluster":
        url = str(request.getfixturevalue("redis_cluster_url"))
    else:
        url = f"{request.getfixturevalue('redis_server').url}?namespace=t{uuid.uuid4().hex}"
    opened = RedisBroker(RedisConfig.from_url(url))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def server_broker(redis_server: RedisServer) -> Iterator[RedisBroker]:
    opened = RedisBroker(RedisConfig.from_url(f"{redis_server.url}?namespace=t{uuid.uuid4().hex}"))
    try:
        yield opened
    finally:
        opened.close()


def _task(broker: RedisBroker, queue: str, n: int, label: str | None = None) -> NewTask:
    """Task ``n`` of ``queue``, its id generated as an app's is (``~`` and a partition's label in
    rotation), or naming ``label``."""
    suffix = broker.id_suffixes()
    assert suffix is not None
    tail = suffix(queue) if label is None else "~" + label
    return NewTask(id=f"{queue}-{n}-{uuid.uuid4().hex[:6]}{tail}", name="job", queue=queue, payload=f"[[{n}], {{}}]")


def _fcalls(broker: RedisBroker) -> int:
    return int(broker.client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


def _labels(broker: RedisBroker, queue: str) -> list[str]:
    """The labels of the queue's active partitions (a retired one, such as its one slot from before it
    was partitioned, is claimed from but no longer enqueued into)."""
    return list(broker._spreads(fresh=True)[queue].labels)


def test_a_batch_over_six_partitions_is_one_call_per_chunk_on_one_server(server_broker: RedisBroker) -> None:
    broker = server_broker
    broker.configure_queue(QueueSettings("hot", partitions=6))
    warm = [_task(broker, "hot", -n) for n in range(1, 7)]
    broker.enqueue(warm, NOW)  # registered in every partition
    before = _fcalls(broker)
    batch = [_task(broker, "hot", n) for n in range(ENQUEUE_CHUNK + 100)]
    assert broker.enqueue(batch, NOW) == [None] * len(batch)
    assert _fcalls(broker) - before == 2
    claimed: list[str] = []
    while got := broker.claim(["hot"], NOW, 60.0, limit=100):
        claimed += [record.id for record in got]
    assert sorted(claimed) == sorted(new.id for new in warm + batch)
    for label in _labels(broker, "hot"):  # FIFO within each partition
        mine = [task_id for task_id in claimed if task_id.endswith("~" + label)]
        assert mine == [new.id for new in warm + batch if new.id.endswith("~" + label)]


def test_tasks_of_one_call_sort_across_partitions_in_the_order_enqueued(broker: RedisBroker) -> None:
    broker.configure_queue(QueueSettings("hot", partitions=3))
    batches = [[_task(broker, "hot", 10 * b + n) for n in range(7)] for b in range(3)]
    for batch in batches:
        assert broker.enqueue(batch, NOW) == [None] * 7
    rows = {record.id: record for record in broker.claim(["hot"], NOW, 60.0, limit=100)}
    assert len(rows) == 21
    members: list[str] = []
    for label in _labels(broker, "hot"):
        slot = broker.keys.slot(broker.keys.label_prefix(label))
        members += cast("list[str]", broker.client.zrange(slot.leases, 0, -1))
    by_member = [member[16:] for member in sorted(members)]  # the sequence number, then the id
    assert by_member == [new.id for batch in batches for new in batch]


def test_a_batch_sent_twice_answers_each_task_a_duplicate(broker: RedisBroker) -> None:
    broker.configure_queue(QueueSettings("hot", partitions=3))
    batch = [_task(broker, "hot", n) for n in range(9)]
    assert broker.enqueue(batch, NOW) == [None] * 9
    assert broker.enqueue(batch, NOW) == [new.id for new in batch]
    assert broker.enqueue([*batch[:2], _task(broker, "hot", 99)], NOW) == [batch[0].id, batch[1].id, None]
    counts = next(info.counts for info in broker.queues(NOW) if info.name == "hot")
    assert counts["pending"] == 10


def test_a_full_partition_stores_the_parts_before_it_and_refuses(broker: RedisBroker) -> None:
    broker.configure_queue(QueueSettings("hot", max_size=6, partitions=3))  # 2 per partition
    first, second, third = _labels(broker, "hot")
    assert broker.enqueue([_task(broker, "hot", n, third) for n in range(2)], NOW) == [None, None]
    batch = [_task(broker, "hot", 10, first), _task(broker, "hot", 11, second), _task(broker, "hot", 12, third)]
    with pytest.raises(QueueFull) as refused:
        broker.enqueue(batch, NOW)
    assert [broker.get(new.id, NOW) is not None for new in batch] == [True, True, False]
    assert sorted(refused.value.stored) == sorted(new.id for new in batch[:2])
    assert broker.enqueue([_task(broker, "hot", 20, first)], NOW) == [None]  # its number moved as stored


def test_a_joined_call_refused_in_a_later_part_names_the_parts_it_stored(broker: RedisBroker) -> None:
    """Parts of two tasks each, joined in one call on one server (each partition has had a task, so
    that no part is refused for its registration first)."""
    broker.configure_queue(QueueSettings("hot", max_size=9, partitions=3))  # 3 per partition
    first, second, third = _labels(broker, "hot")
    before = [_task(broker, "hot", n, label) for n, label in enumerate((first, second, third, third, third))]
    assert broker.enqueue(before, NOW) == [None] * 5
    batch = [_task(broker, "hot", 10 + n, label) for label in (first, second, third) for n in range(2)]
    with pytest.raises(QueueFull) as refused:
        broker.enqueue(batch, NOW)
    assert [broker.get(new.id, NOW) is not None for new in batch] == [True] * 4 + [False] * 2
    assert sorted(refused.value.stored) == sorted(new.id for new in batch[:4])


def test_queues_new_to_the_registry_are_registered_in_any_part(server_broker: RedisBroker) -> None:
    broker = server_broker
    assert broker.enqueue([_task(broker, "a", 0)], NOW) == [None]
    batch = [_task(broker, queue, n) for n in range(3) for queue in ("a", "b", "c")]  # b, c: new
    assert broker.enqueue(batch, NOW) == [None] * 9
    assert {info.name: info.counts["pending"] for info in broker.queues(NOW)} == {"a": 4, "b": 3, "c": 3}
    again = [_task(broker, queue, n) for n in range(3) for queue in ("a", "b", "c")]
    before = _fcalls(broker)
    assert broker.enqueue(again, NOW) == [None] * 9
    assert _fcalls(broker) - before == 1


def test_a_joined_call_sent_again_answers_as_its_first_send(proxy: CuttingProxy) -> None:
    namespace = "t" + uuid.uuid4().hex
    opened = RedisBroker(RedisConfig.from_url(f"redis://127.0.0.1:{proxy.port}/0?namespace={namespace}"))
    try:
        opened.configure_queue(QueueSettings("hot", partitions=3))
        held = [_task(opened, "hot", n) for n in range(3)]
        assert opened.enqueue(held, NOW) == [None] * 3
        batch = [held[1], *(_task(opened, "hot", n) for n in range(10, 15))]
        made = cut_once(proxy, b"_enqueue")
        assert opened.enqueue(batch, NOW) == [held[1].id] + [None] * 5
        made()
        for new in batch:
            record = opened.get(new.id, NOW)
            assert record is not None and record.state == TaskState.PENDING
        assert next(info.counts["pending"] for info in opened.queues(NOW) if info.name == "hot") == 8
    finally:
        opened.close()


# -- the joined calls against the calls of one slot each ----------------------------------------

QUEUES = ("a", "b", "hot")  # "hot" in 3 partitions
batches = st.lists(st.tuples(st.sampled_from(QUEUES), st.integers(0, 11)), min_size=2, max_size=16)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), batches),
        st.tuples(st.just("claim"), st.integers(1, 8)),
        st.tuples(st.just("max_size"), st.sampled_from(QUEUES), st.sampled_from([None, 3, 9])),
    ),
    min_size=1,
    max_size=8,
)


@pytest.fixture(scope="module")
def private_server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


TOKEN = re.compile(r"\b[0-9a-f]{24}-\d+\b")


def _keyspace(broker: RedisBroker, namespace: str) -> dict[str, object]:
    """Every key of ``namespace`` and its value, but the resend tokens and ``listening`` (lease
    tokens and the times partitions were retired masked)."""
    client = broker.client
    out: dict[str, object] = {}
    for key in cast("list[str]", client.keys(f"{{{namespace}*")):
        if ":sent:" in key or key.endswith(":listening"):
            continue
        kind = client.type(key)
        read = {
            "hash": client.hgetall,
            "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            "string": client.get,
            "list": lambda k: client.lrange(k, 0, -1),
            "set": client.smembers,
        }[cast("str", kind)]
        value = read(key)
        if key.endswith(":rows"):  # lease tokens are random
            value = {k: TOKEN.sub("-", row) for k, row in cast("dict[str, str]", value).items()}
        if key.endswith(":parts"):  # when a partition was retired: the server's clock, in seconds
            value = {
                k: "-" if " " in k and not k.endswith(" #") else v for k, v in cast("dict[str, str]", value).items()
            }
        out[key] = value
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_joined_calls_store_and_refuse_what_calls_of_one_slot_each_do(
    private_server: RedisServer, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[Any, ...]]
) -> None:
    namespace = "j" + uuid.uuid4().hex[:10]
    joined, alone = (
        RedisBroker(RedisConfig.from_url(f"redis://127.0.0.1:{private_server.port}/{db}?namespace={namespace}"))
        for db in (0, 1)
    )
    way = fanout.way
    monkeypatch.setattr(fanout, "way", lambda broker, tasks: None if broker is alone else way(broker, tasks))
    # both brokers' rotations (claims over a queue's partitions, retired ones included) start alike:
    # each starts at a random place, which is what two brokers must not differ by here
    monkeypatch.setattr(spread, "random", SimpleNamespace(randrange=lambda _: 0))
    try:
        labels: list[str] = []
        for broker in (joined, alone):
            broker.configure_queue(QueueSettings("hot", partitions=3))
            labels = _labels(broker, "hot")
        for op in ops:
            answers = []
            for broker in (joined, alone):
                try:
                    if op[0] == "enqueue":
                        answer: object = broker.enqueue([_tasked(q, n, labels) for q, n in op[1]], NOW)
                    elif op[0] == "claim":
                        answer = sorted(r.id for r in broker.claim(list(QUEUES), NOW, 60.0, limit=op[1]))
                    else:
                        broker.configure_queue(
                            QueueSettings(op[1], max_size=op[2], partitions=3 if op[1] == "hot" else 1)
                        )
                        answer = None
                except QueueFull as exc:
                    answer = ("QueueFull", exc.queue, sorted(exc.stored))
                answers.append(answer)
            assert answers[0] == answers[1], op
        assert _keyspace(joined, namespace) == _keyspace(alone, namespace)
    finally:
        joined.close()
        alone.close()


def _tasked(queue: str, n: int, labels: list[str]) -> NewTask:
    """Task ``n`` of ``queue``, the same id whichever broker: a partition of "hot" by ``n``."""
    label = labels[n % len(labels)] if queue == "hot" else queue
    return NewTask(id=f"{queue}{n}~{label}", name="job", queue=queue, payload=f"[[{n}], {{}}]")


# -- a cluster: the slots' calls sent at once ---------------------------------------------------


@pytest.fixture
def cluster_broker(redis_cluster_url: str) -> Iterator[RedisBroker]:
    opened = RedisBroker(RedisConfig.from_url(redis_cluster_url))
    try:
        assert opened.cluster
        yield opened
    finally:
        opened.close()


def test_every_partitions_call_is_sent_before_any_reply_is_read(
    cluster_broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = cluster_broker
    broker.configure_queue(QueueSettings("hot", partitions=6))
    broker.enqueue([_task(broker, "hot", -n) for n in range(1, 7)], NOW)  # registered in every partition
    steps: list[str] = []
    send, read = Connections.send, Connections.read

    def sent(conns: Connections, command: Command) -> AbstractConnection:
        steps.append("send")
        return send(conns, command)

    def reply(conns: Connections, conn: AbstractConnection) -> Any:
        steps.append("read")
        return read(conns, conn)

    monkeypatch.setattr(Connections, "send", sent)
    monkeypatch.setattr(Connections, "read", reply)
    batch = [_task(broker, "hot", n) for n in range(60)]
    assert broker.enqueue(batch, NOW) == [None] * 60
    assert steps == ["send"] * 6 + ["read"] * 6
    assert all(broker.get(new.id, NOW) is not None for new in batch)


def test_partitions_new_to_the_registry_are_registered_by_their_call_sent_again(cluster_broker: RedisBroker) -> None:
    broker = cluster_broker
    broker.configure_queue(QueueSettings("hot", partitions=3))  # no task yet: no partition registered
    batch = [_task(broker, "hot", n) for n in range(9)]
    assert broker.enqueue(batch, NOW) == [None] * 9
    assert next(info.counts["pending"] for info in broker.queues(NOW) if info.name == "hot") == 9


def test_a_max_size_another_broker_set_meanwhile_refuses_the_call(
    cluster_broker: RedisBroker, redis_cluster: LocalCluster
) -> None:
    broker = cluster_broker
    broker.configure_queue(QueueSettings("hot", partitions=3))
    assert broker.enqueue([_task(broker, "hot", n) for n in range(3)], NOW) == [None] * 3  # its spread read
    other = RedisBroker(RedisConfig.from_url(redis_cluster.namespace_url(broker.config.namespace)))
    try:
        other.configure_queue(QueueSettings("hot", max_size=3, partitions=3))  # full: one task each
    finally:
        other.close()
    with pytest.raises(QueueFull):
        broker.enqueue([_task(broker, "hot", n) for n in range(10, 16)], NOW)
    assert next(info.counts["pending"] for info in broker.queues(NOW) if info.name == "hot") == 3


def test_a_partitions_call_cut_on_a_cluster_answers_as_its_first_send(
    cluster_proxies: list[CuttingProxy], redis_cluster: LocalCluster
) -> None:
    opened = RedisBroker(RedisConfig.from_url(redis_cluster.namespace_url()))
    try:
        opened.configure_queue(QueueSettings("hot", partitions=3))
        held = [_task(opened, "hot", n) for n in range(3)]
        assert opened.enqueue(held, NOW) == [None] * 3
        batch = [held[1], *(_task(opened, "hot", n) for n in range(10, 15))]
        made = cut_once(cluster_proxies[0], b"_enqueue")  # one partition's call, the others read
        assert opened.enqueue(batch, NOW) == [held[1].id] + [None] * 5
        made()
        assert next(info.counts["pending"] for info in opened.queues(NOW) if info.name == "hot") == 8
    finally:
        opened.close()
