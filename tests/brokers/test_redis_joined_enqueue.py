"""On one server, an enqueue over several queue slots (a partitioned queue's partitions, or queues
of their own slots) is one script call per chunk (``joined()`` in ``enqueue.lua``), storing and
refusing what the calls of one slot each did: the same tasks, numbers and answers."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK
from conveyor.brokers.redis.config import RedisConfig
from conveyor.errors import QueueFull
from conveyor.model import NewTask, QueueSettings, TaskState
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .resent import cut_once
from .split import NOW


@pytest.fixture
def broker(redis_server: RedisServer) -> Iterator[RedisBroker]:
    config = RedisConfig.from_url(f"{redis_server.url}?namespace=t{uuid.uuid4().hex}")
    opened = RedisBroker(config)
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
    return [prefix.split("|", 1)[1].split("}")[0] for prefix in broker._queue_prefixes(queue)]


def test_a_batch_over_six_partitions_is_one_call_per_chunk(broker: RedisBroker) -> None:
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
    with pytest.raises(QueueFull):
        broker.enqueue(batch, NOW)
    assert [broker.get(new.id, NOW) is not None for new in batch] == [True, True, False]
    assert broker.enqueue([_task(broker, "hot", 20, first)], NOW) == [None]  # its number moved as stored


def test_queues_new_to_the_registry_are_registered_in_any_part(broker: RedisBroker) -> None:
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
    tokens masked)."""
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
    monkeypatch.setattr(alone, "_joins", lambda tasks: False)
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
                        answer = broker.configure_queue(
                            QueueSettings(op[1], max_size=op[2], partitions=3 if op[1] == "hot" else 1)
                        )
                except QueueFull as exc:
                    answer = ("QueueFull", exc.queue)
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
