"""Calls made one after another on one connection (``Connections.execute_each``), as a batch
enqueue larger than one chunk makes them: the next chunk is encoded while the server stores this one,
and is sent only once this one's reply says it was stored."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK
from conveyor.brokers.redis.codec import ROW_FIELDS, ROW_NAMES
from conveyor.brokers.redis.connections import Command, Connections
from conveyor.errors import QueueFull
from conveyor.model import BrokerPolicy, NewTask, Outcome, QueueSettings, TaskState
from conveyor.testing.redis_server import RedisServer

NOW = 1_000_000.0


def task(task_id: str, queue: str) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")


@pytest.fixture
def broker(redis_url: str) -> Iterator[RedisBroker]:
    opened = RedisBroker.from_url(redis_url, BrokerPolicy())
    yield opened
    opened.close()


def test_chunks_after_a_refused_one_are_never_sent(broker: RedisBroker) -> None:
    broker.configure_queue(QueueSettings("small", max_size=ENQUEUE_CHUNK + 10))
    tasks = [
        *(task(f"a{i}", "small") for i in range(ENQUEUE_CHUNK)),  # stored
        *(task(f"b{i}", "small") for i in range(ENQUEUE_CHUNK)),  # refused: the queue would overflow
        *(task(f"c{i}", "other") for i in range(ENQUEUE_CHUNK)),  # would fit, but comes after the refusal
    ]
    with pytest.raises(QueueFull) as refused:
        broker.enqueue(tasks, NOW)
    assert (refused.value.queue, refused.value.max_size) == ("small", ENQUEUE_CHUNK + 10)
    assert broker.get("a0", NOW) is not None and broker.get(f"a{ENQUEUE_CHUNK - 1}", NOW) is not None
    assert broker.get("b0", NOW) is None and broker.get(f"b{ENQUEUE_CHUNK - 1}", NOW) is None
    assert broker.get("c0", NOW) is None and broker.get(f"c{ENQUEUE_CHUNK - 1}", NOW) is None
    counts = {info.name: info.counts.get(TaskState.PENDING.value, 0) for info in broker.queues(NOW)}
    assert counts.get("small") == ENQUEUE_CHUNK and counts.get("other", 0) == 0


def test_a_chunk_of_one_after_full_chunks_is_stored(broker: RedisBroker) -> None:
    count = ENQUEUE_CHUNK + 1  # the last chunk travels as one task's fields, not as JSON
    tasks = [task(f"t{i}", "q") for i in range(count)]
    assert broker.enqueue(tasks, NOW) == [None] * count
    assert broker.enqueue([task("t0", "q"), task(f"t{count - 1}", "q")], NOW) == ["t0", f"t{count - 1}"]
    more = [task(f"u{i}", "q") for i in range(ENQUEUE_CHUNK)]
    assert broker.enqueue([*more, task("t12", "q")], NOW) == [None] * ENQUEUE_CHUNK + ["t12"]  # a duplicate alone
    assert [r.id for r in broker.claim(["q"], NOW, 30.0, limit=count)] == [t.id for t in tasks]


def test_each_task_of_a_several_chunk_batch_gets_its_own_result(broker: RedisBroker) -> None:
    """A chunk replies "" when it stored every task, else one line per task: results keep their places
    across chunks of either kind, and a last chunk shorter than the others."""
    taken = [task(f"old{i}", "q") for i in range(3)]
    assert broker.enqueue(taken, NOW) == [None] * 3
    fresh = [task(f"n{i}", "q") for i in range(2 * ENQUEUE_CHUNK + 7)]
    batch = [*fresh[:-7], *taken, *fresh[-7:]]  # chunks: 500 new, 500 new, then 10 with the 3 taken ids
    batch[ENQUEUE_CHUNK + 10] = task("old1", "q")  # and one inside the 2nd chunk
    expected: list[str | None] = [None] * len(batch)
    for position, queued in enumerate(batch):
        if queued.id.startswith("old"):
            expected[position] = queued.id
    assert broker.enqueue(batch, NOW) == expected
    assert broker.get(fresh[-1].id, NOW) is not None and broker.get(fresh[ENQUEUE_CHUNK + 10].id, NOW) is None


def test_a_server_without_the_library_gets_it_in_the_middle_of_a_batch(broker: RedisBroker) -> None:
    broker.enqueue([task("warm", "q")], NOW)  # the library is loaded
    broker.client.function_flush()
    count = 2 * ENQUEUE_CHUNK + 3
    assert broker.enqueue([task(f"t{i}", "q") for i in range(count)], NOW) == [None] * count
    assert len(broker.claim(["q"], NOW, 30.0, limit=count + 1)) == count + 1


def test_the_next_command_is_made_before_the_reply_is_read_and_sent_after_it_is_handled(
    redis_server: RedisServer,
) -> None:
    conns = Connections(redis_server.client().connection_pool)
    key = f"{{chunks-{time.monotonic_ns()}}}:list"
    log: list[str] = []

    def commands() -> Iterator[Command]:
        for i in range(3):
            log.append(f"made {i}")
            yield ("RPUSH", key, str(i))

    def handle(command: Command, reply: Any) -> None:
        log.append(f"handled {command[2]} -> {reply}")

    conns.execute_each(commands(), handle)
    conns.close()
    # "made 1" comes before "handled 0": command 1 was made while command 0 was on the server
    assert log == ["made 0", "made 1", "handled 0 -> 1", "made 2", "handled 1 -> 2", "handled 2 -> 3"]
    assert redis_server.client().lrange(key, 0, -1) == ["0", "1", "2"]


def test_an_exception_from_handle_stops_the_commands_still_unsent(redis_server: RedisServer) -> None:
    conns = Connections(redis_server.client().connection_pool)
    key = f"{{chunks-{time.monotonic_ns()}}}:list"

    def handle(command: Command, reply: Any) -> None:
        if reply == 2:
            raise RuntimeError("stop here")

    commands = iter([("RPUSH", key, "0"), ("RPUSH", key, "1"), ("RPUSH", key, "2"), ("RPUSH", key, "3")])
    with pytest.raises(RuntimeError, match="stop here"):
        conns.execute_each(commands, handle)
    assert redis_server.client().lrange(key, 0, -1) == ["0", "1"]  # "2" was made, never sent
    assert conns.execute([("LLEN", key)]) == [2]  # the connection went back in step
    conns.close()


def test_an_error_reply_reaches_handle_and_the_rest_still_run(redis_server: RedisServer) -> None:
    conns = Connections(redis_server.client().connection_pool)
    key = f"{{chunks-{time.monotonic_ns()}}}:str"
    replies: list[Any] = []
    commands = iter([("SET", key, "x"), ("LPUSH", key, "wrong type"), ("GET", key)])
    conns.execute_each(commands, lambda _command, reply: replies.append(reply))
    conns.close()
    assert replies[0] is True or replies[0] == "OK"
    assert isinstance(replies[1], redis.ResponseError) and "WRONGTYPE" in str(replies[1])
    assert replies[2] == "x"


def test_a_connection_killed_under_a_command_sends_it_again(redis_server: RedisServer) -> None:
    admin = redis_server.client()
    conns = Connections(admin.connection_pool)
    key = f"{{chunks-{time.monotonic_ns()}}}:list"
    replies: list[Any] = []

    def commands() -> Iterator[Command]:
        yield ("RPUSH", key, "0")
        # runs while command 0 is on its way: every other client (ours among them) is cut off
        admin.client_kill_filter(_type="normal", skipme=True)
        yield ("RPUSH", key, "1")

    conns.execute_each(commands(), lambda _command, reply: replies.append(reply))
    conns.close()
    stored = admin.lrange(key, 0, -1)
    # command 0 may have run before the cut: its retry then stores it twice (at-least-once, as any
    # retried call); either way every command ran and each handle saw a reply, in order
    assert stored in (["0", "1"], ["0", "0", "1"])
    assert replies == [1, len(stored)] or replies == [len(stored) - 1, len(stored)]


def test_a_claim_and_a_settle_larger_than_luas_unpack_limit_are_served_whole(broker: RedisBroker) -> None:
    """``claim.lua`` hands a popped batch's ids to HMGET through ``unpack()``, which Lua caps at 8000
    values: a larger ``limit`` is popped in parts, and every task is claimed once and settled."""
    count = 9000
    assert broker.enqueue([task(f"t{i}", "big") for i in range(count)], NOW) == [None] * count
    claimed = broker.claim(["big"], NOW, 30.0, limit=count + 5)
    assert sorted(r.id for r in claimed) == sorted(f"t{i}" for i in range(count))
    assert len({r.lease_token for r in claimed}) == count
    outcomes = [Outcome(r.id, r.lease_token or "", "complete", result=r.id) for r in claimed]
    assert broker.settle(outcomes, NOW) == [True] * count
    (info,) = broker.queues(NOW)
    assert (info.counts["completed"], info.counts["active"], info.counts["pending"]) == (count, 0, 0)
    assert broker.get("t8999", NOW).result == "t8999"  # type: ignore[union-attr]


def row_field(broker: RedisBroker, task_id: str, name: str, queue: str = "g") -> str:
    """One field of a task's row as stored in its queue's slot (see ``codec.py``)."""
    keys = broker.keys
    row = cast("str", broker.client.hget(keys.slot(keys.queue_prefix(queue)).rows, task_id))
    return row.split(" ", ROW_FIELDS - 1)[ROW_NAMES.index(name)]


def test_tasks_of_one_call_wait_as_one_group_that_leaves_no_key_behind(broker: RedisBroker) -> None:
    """A batch's plain tasks take one ``waiting`` member per call and queue (see ``lua/_rows.lua``); each
    way out of ``pending`` counts the group down, and the last one removes it."""
    client, keys = broker.client, broker.keys
    slot = keys.slot(keys.queue_prefix("g"))
    waiting, groups = slot.queue("g", "waiting"), slot.queue("g", "groups")
    n = ENQUEUE_CHUNK + 3  # two calls: two groups, though both at NOW
    assert broker.enqueue([task(f"t{i}", "g") for i in range(n)], NOW) == [None] * n
    assert broker.enqueue([task("one", "g")], NOW) == [None]  # a one-task call waits on its own
    entries = cast("list[tuple[str, float]]", client.zrange(waiting, 0, -1, withscores=True))
    assert dict(entries) == {f"g{NOW!r}": NOW, row_field(broker, "one", "m"): NOW}
    assert client.hgetall(groups) == {f"g{NOW!r}": str(n)}  # same call time: one group
    assert row_field(broker, "t0", "fa") == f"g{NOW!r}"  # the group, while pending
    claimed = broker.claim(["g"], NOW, 30.0, limit=n - 3)
    assert client.hgetall(groups) == {f"g{NOW!r}": "3"}
    active = broker.get(claimed[0].id, NOW)
    assert active is not None and active.finished_at is None  # fa means nothing while active
    broker.archive(f"t{n - 1}", NOW)
    broker.cancel(f"t{n - 2}", NOW)
    assert client.hgetall(groups) == {f"g{NOW!r}": "1"}
    broker.settle([Outcome(r.id, r.lease_token or "", "release") for r in claimed[:1]], NOW)  # back, alone
    assert client.zscore(waiting, row_field(broker, claimed[0].id, "m")) == NOW
    assert {r.id for r in broker.claim(["g"], NOW, 30.0, limit=5)} == {claimed[0].id, f"t{n - 3}", "one"}
    assert not client.exists(groups, waiting)
    archived = broker.get(f"t{n - 1}", NOW)
    assert archived is not None and archived.state is TaskState.ARCHIVED
