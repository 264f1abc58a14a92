"""Unique keys claimed in the namespace slot, then stored in the queue slot (``claims.py``, issue 33).

With split slots (``SplitKeys``: every queue a slot of its own) an enqueue claims its tasks' unique
keys with ``take`` first, then stores the tasks in their queue slot: on one server in one call while
every entry is free (``take_enqueue``, "split"), on a cluster in two ("split, per call" makes them
two on one server too). Each test runs on a real server; those that state a rule of uniqueness run
in layout 4 as well, where the enqueue script checks the keys itself, and must give the same answers
there.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from conveyor.brokers.redis import RedisBroker, claims
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.errors import QueueFull, ReplicationTimeout
from conveyor.model import NewTask, Outcome, QueueSettings, TaskState
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer

from .split import NOW, PerSlotBroker, SplitKeys, task

LAYOUTS = ["split", "split, per call", "layout 4"]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def open_broker(server: RedisServer, layout: str, query: str = "") -> RedisBroker:
    return open_url(server.url + query, layout)


def open_url(url: str, layout: str) -> RedisBroker:
    config = RedisConfig.from_url(url)
    keys = Keys(config.namespace) if layout == "layout 4" else SplitKeys(config.namespace)
    return (PerSlotBroker if layout == "split, per call" else RedisBroker)(config, keys=keys)


#: ``split on a cluster``: the queues' slots spread over the session's 3-master cluster, which refuses
#: a script that touches a key outside its declared slot
@pytest.fixture(params=[*LAYOUTS, pytest.param("split on a cluster", marks=pytest.mark.slow)])
def broker(request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    if request.param == "split on a cluster":
        url = str(request.getfixturevalue("redis_cluster_url"))
    else:
        url = request.getfixturevalue("server").url
    opened = open_url(url, request.param)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=["split", "split, per call"])
def split(server: RedisServer, request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    opened = open_broker(server, request.param)
    try:
        yield opened
    finally:
        opened.close()


def holder(broker: RedisBroker, key: str) -> str | None:
    """The id the namespace slot's entry for ``key`` names (entries of split slots add a time)."""
    entry = broker.client.hget(broker.keys.uniq, key)
    return None if entry is None else str(entry).split(" ")[0]


def test_a_unique_key_held_in_another_queues_slot_makes_a_duplicate(broker: RedisBroker) -> None:
    assert broker.enqueue([task("1~a", unique_key="u")], NOW) == [None]
    assert broker.enqueue([task("2~b", unique_key="u")], NOW) == ["1~a"]
    assert broker.enqueue([task("3~a", unique_key="v"), task("4~b", unique_key="v")], NOW) == [None, "3~a"]
    assert broker.get("2~b", NOW) is None and broker.get("4~b", NOW) is None


def test_a_finished_holder_in_another_slot_gives_its_key_up(broker: RedisBroker) -> None:
    assert broker.enqueue([task("1~a", unique_key="u")], NOW) == [None]
    (claimed,) = broker.claim(["a"], NOW, 30.0)
    assert broker.settle([Outcome("1~a", claimed.lease_token or "", "complete")], NOW) == [True]
    assert broker.enqueue([task("2~b", unique_key="u")], NOW) == [None]
    assert holder(broker, "u") == "2~b"
    assert broker.enqueue([task("3~a", unique_key="u")], NOW) == ["2~b"]


def test_a_holder_past_its_unique_until_gives_its_key_up(broker: RedisBroker) -> None:
    assert broker.enqueue([task("1~a", unique_key="u")], NOW) == [None]  # holds until NOW + 100
    assert broker.enqueue([task("2~b", unique_key="u")], NOW + 99) == ["1~a"]
    assert broker.enqueue([task("3~b", unique_key="u")], NOW + 100) == [None]
    assert holder(broker, "u") == "3~b"


def test_a_refused_first_task_passes_its_key_to_the_next_with_it(broker: RedisBroker) -> None:
    """The first task of a call with key k is a duplicate by its id: the next task with k is stored
    and holds k, the one after that duplicates it, as in one script."""
    assert broker.enqueue([task("1~a")], NOW) == [None]
    batch = [task("1~a", unique_key="k"), task("5~a", unique_key="k"), task("6~a", unique_key="k")]
    assert broker.enqueue(batch, NOW) == ["1~a", None, "5~a"]
    assert holder(broker, "k") == "5~a"
    assert broker.enqueue([task("7~b", unique_key="k")], NOW) == ["5~a"]


def test_a_key_claimed_for_a_task_its_queue_refused_is_freed_at_once(split: RedisBroker) -> None:
    split.configure_queue(QueueSettings("b", max_size=1))
    assert split.enqueue([task("1~b")], NOW) == [None]
    with pytest.raises(QueueFull):
        split.enqueue([task("2~b", unique_key="u")], NOW)
    assert holder(split, "u") is None
    assert split.enqueue([task("1~b", unique_key="v")], NOW) == ["1~b"]  # a duplicate id
    assert holder(split, "v") is None
    assert split.enqueue([task("3~a", unique_key="u"), task("4~a", unique_key="v")], NOW) == [None, None]


def test_a_call_refused_after_a_run_names_the_tasks_it_stored(broker: RedisBroker) -> None:
    """A key in tasks of two slots: the call goes run by run (``_enqueue_in_order``); the second
    run's refusal names the first run's task, its duplicate not (on one slot: one call, nothing)."""
    broker.configure_queue(QueueSettings("a", max_size=1))
    assert broker.enqueue([task("0~a")], NOW) == [None]
    batch = [task("1~b", unique_key="k"), task("2~a", unique_key="k"), task("3~a")]
    with pytest.raises(QueueFull) as refused:
        broker.enqueue(batch, NOW)
    kept = [new.id for new in batch if broker.get(new.id, NOW) is not None]
    assert sorted(refused.value.stored) == kept == ([] if broker.keys.one_slot else ["1~b"])


def test_a_key_of_a_task_stored_again_under_its_id_stays_claimed(split: RedisBroker) -> None:
    """Enqueued again while it holds its key: a duplicate, and its entry is left to it."""
    assert split.enqueue([task("1~a", unique_key="u")], NOW) == [None]
    assert split.enqueue([task("1~a", unique_key="u"), task("2~a", unique_key="u")], NOW) == ["1~a", "1~a"]
    assert holder(split, "u") == "1~a"
    assert split.enqueue([task("3~b", unique_key="u")], NOW) == ["1~a"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_unique_key_whose_release_never_ran_is_free(server: RedisServer, layout: str) -> None:
    """A crash between a delete (queue slot) and ``release`` (namespace slot) leaves the key's entry
    naming a task that is gone: the next task with that key is stored, and takes the entry over."""
    broker = open_broker(server, layout)
    try:
        assert broker.enqueue([task("1~a", unique_key="u")], NOW) == [None]
        broker.delete("1~a", NOW)
        broker.client.hset(broker.keys.uniq, "u", "1~a")  # as if the release after the delete never ran
        assert broker.enqueue([task("2~a", unique_key="u")], NOW) == [None]
        assert broker.enqueue([task("3~a", unique_key="u")], NOW) == ["2~a"]
        assert holder(broker, "u") == "2~a"
    finally:
        broker.close()


@pytest.mark.parametrize("layout", ["split", "split, per call"])
def test_a_key_claimed_for_a_task_never_stored_is_refused_until_the_bound(server: RedisServer, layout: str) -> None:
    """The crash between the two steps: ``take`` wrote the entry, the queue slot's call never ran.
    Its key is refused (an enqueue of that task may still be on its way) until the entry is older
    than twice the socket timeout, then taken over; the task named was never acknowledged."""
    broker = open_broker(server, layout, "?socket_timeout=1")  # the bound: 2 s
    try:
        started = time.monotonic()
        assert claims._take(broker, [("u", "u", "1~a", "")], NOW) == [""]  # step 1 alone
        assert broker.enqueue([task("2~b", unique_key="u")], NOW) == ["1~a"]
        assert holder(broker, "u") == "1~a"
        numbers = itertools.count(3)

        def stored() -> bool:
            (result,) = broker.enqueue([task(f"{next(numbers)}~b", unique_key="u")], NOW)
            return result is None

        poll_until(stored, timeout=10.0, interval=0.1, message="the key taken over")
        assert time.monotonic() - started >= 2.0
        assert broker.get("1~a", NOW) is None
        taken = holder(broker, "u")
        assert taken is not None and broker.get(taken, NOW) is not None
    finally:
        broker.close()


def test_a_task_without_unique_until_is_checked_and_holds_nothing(split: RedisBroker) -> None:
    """A unique key without ``unique_until`` (the app never makes one) holds nothing, as in
    ``memory://``, but a live holder of its key refuses it, in another slot too, and so does an
    earlier task of its call."""
    assert split.enqueue([task("1~a", unique_key="u")], NOW) == [None]
    assert split.enqueue([replace(task("2~b", unique_key="u"), unique_until=None)], NOW) == ["1~a"]
    loose = replace(task("3~a", unique_key="v"), unique_until=None)
    assert split.enqueue([loose, replace(loose, id="4~a")], NOW) == [None, "3~a"]
    assert split.enqueue([task("5~b", unique_key="v")], NOW) == [None]  # 3~a held nothing
    assert holder(split, "v") == "5~b"


def custom(task_id: str, queue: str, unique_key: str | None = None) -> NewTask:
    """A task of ``queue`` with a custom id (no ``~``: found through the namespace slot's ``ids``)."""
    return replace(task("x~" + queue, unique_key=unique_key), id=task_id)


def entry(broker: RedisBroker, task_id: str) -> str | None:
    """The label the namespace slot's entry for custom id ``task_id`` names, if any."""
    found = broker.client.hget(broker.keys.ids, task_id)
    return None if found is None else str(found).split(" ")[0]


def test_a_custom_id_is_found_by_its_entry_and_freed_with_its_task(split: RedisBroker) -> None:
    """With split slots a custom id's entry in the namespace slot names its queue's slot: calls by id
    alone find the task through it, and deleting the task frees it."""
    assert split.enqueue([custom("order-42", "a")], NOW) == [None]
    assert entry(split, "order-42") == "a"
    record = split.get("order-42", NOW)
    assert record is not None and record.queue == "a"
    (claimed,) = split.claim(["a"], NOW, 30.0)
    assert split.extend("order-42", claimed.lease_token or "", NOW, 30.0) is not None
    assert split.settle([Outcome("order-42", claimed.lease_token or "", "complete")], NOW) == [True]
    split.delete("order-42", NOW)
    assert split.get("order-42", NOW) is None
    assert entry(split, "order-42") is None


def test_a_custom_id_is_unique_across_queues(broker: RedisBroker) -> None:
    assert broker.enqueue([custom("order-42", "a")], NOW) == [None]
    assert broker.enqueue([custom("order-42", "b")], NOW) == ["order-42"]
    assert broker.enqueue([custom("order-42", "a"), custom("order-43", "b")], NOW) == ["order-42", None]
    record = broker.get("order-42", NOW)
    assert record is not None and record.queue == "a"
    broker.delete("order-42", NOW)
    assert broker.enqueue([custom("order-42", "b")], NOW) == [None]  # its entry went with the task
    record = broker.get("order-42", NOW)
    assert record is not None and record.queue == "b"


def test_an_id_claimed_for_a_task_refused_is_freed_at_once(split: RedisBroker) -> None:
    split.configure_queue(QueueSettings("b", max_size=1))
    assert split.enqueue([task("1~b", unique_key="u")], NOW) == [None]
    with pytest.raises(QueueFull):
        split.enqueue([custom("order-9", "b")], NOW)
    assert split.enqueue([custom("order-8", "a", unique_key="u")], NOW) == ["1~b"]  # refused for its key
    assert entry(split, "order-9") is None and entry(split, "order-8") is None
    assert split.purge("b", TaskState.PENDING, NOW) == 1
    assert split.enqueue([custom("order-9", "b"), custom("order-8", "a", unique_key="u")], NOW) == [None, None]
    assert split.purge("b", TaskState.PENDING, NOW) == 1
    assert entry(split, "order-9") is None and entry(split, "order-8") == "a"


@pytest.mark.parametrize("layout", ["split", "split, per call"])
@pytest.mark.parametrize("same_queue", [True, False])
def test_a_custom_id_whose_task_write_never_ran_is_usable_afterwards(
    server: RedisServer, same_queue: bool, layout: str
) -> None:
    """The crash between a custom id's two writes: its entry names queue a's slot, the task was never
    stored there. A read finds no task (the truth); an enqueue of the id in queue a stores it at once
    (its slot checks the id itself); in queue b it is refused until the entry is older than twice
    the socket timeout (the enqueue in a may still be on its way), then stored; nothing is lost and
    the task runs."""
    broker = open_broker(server, layout, "?socket_timeout=1")  # the bound: 2 s
    try:
        started = time.monotonic()
        assert claims._take(broker, [("i", "order-7", "a", "")], NOW) == [""]  # step 1 alone
        assert broker.get("order-7", NOW) is None
        queue = "a" if same_queue else "b"
        if same_queue:
            assert broker.enqueue([custom("order-7", queue)], NOW) == [None]
        else:
            assert broker.enqueue([custom("order-7", queue)], NOW) == ["order-7"]
            poll_until(
                lambda: broker.enqueue([custom("order-7", queue)], NOW) == [None],
                timeout=10.0,
                interval=0.1,
                message="the id taken over",
            )
            assert time.monotonic() - started >= 2.0
        assert entry(broker, "order-7") == queue
        (claimed,) = broker.claim([queue], NOW, 30.0)
        assert claimed.id == "order-7"
        assert broker.settle([Outcome("order-7", claimed.lease_token or "", "complete")], NOW) == [True]
        record = broker.get("order-7", NOW)
        assert record is not None and record.state is TaskState.COMPLETED
    finally:
        broker.close()


@pytest.mark.parametrize("layout", ["split", "split, per call"])
def test_entries_of_tasks_withdrawn_short_of_replicas_are_freed(server: RedisServer, layout: str) -> None:
    """``wait_replicas`` with no replica: the chunk is stored, then withdrawn (``ReplicationTimeout``),
    and its tasks' entries go with them, so the key and the id are free at once."""
    broker = open_broker(server, layout, "?wait_replicas=1&wait_timeout=10")
    plain = open_broker(server, "split")
    try:
        with pytest.raises(ReplicationTimeout) as short:
            broker.enqueue([task("1~a", unique_key="u"), custom("order-1", "a"), task("2~a", unique_key="u")], NOW)
        assert sorted(short.value.withdrawn) == ["1~a", "order-1"]
        assert holder(broker, "u") is None and entry(broker, "order-1") is None
        assert plain.enqueue([custom("order-1", "b", unique_key="u")], NOW) == [None]
    finally:
        plain.close()
        broker.close()


def fcalls(broker: RedisBroker) -> int:
    """The script calls the broker's server has run."""
    stats = broker.client.info("commandstats").get("cmdstat_fcall")
    return int(stats["calls"]) if stats else 0


def test_a_chunk_whose_entries_are_free_is_one_call_on_one_server(split: RedisBroker) -> None:
    """On one server the take and the enqueue are one call (``take_enqueue.lua``) while every entry is
    free; made per call, as on a cluster, they are two. An entry held sends the take's answers back
    and the broker goes on as after a take of its own: the same answers either way."""
    joined = split.joins_slots
    assert split.enqueue([task("0~a")], NOW) == [None]  # the queue registered: no refusal below
    for new in (task("1~a", unique_key="u"), custom("order-1", "a"), custom("order-2", "a", unique_key="v")):
        before = fcalls(split)
        assert split.enqueue([new], NOW) == [None]
        assert fcalls(split) - before == (1 if joined else 2)
    before = fcalls(split)
    assert split.enqueue([task("3~a", unique_key="w"), task("4~a", unique_key="x")], NOW) == [None, None]
    assert fcalls(split) - before == (1 if joined else 2)
    assert holder(split, "w") == "3~a" and holder(split, "x") == "4~a"
    assert entry(split, "order-1") == "a"
    before = fcalls(split)  # a key held by a live task: the joined call refuses, the take's writes made
    assert split.enqueue([custom("order-3", "a", unique_key="u"), task("5~a", unique_key="y")], NOW) == ["1~a", None]
    assert fcalls(split) - before == 3  # the take (refused joined), the enqueue, the id's release
    assert holder(split, "u") == "1~a" and holder(split, "y") == "5~a"
    assert entry(split, "order-3") is None  # its task refused by its key: the id freed


def since(broker: RedisBroker, index: str, field: str) -> float:
    """The time the namespace slot's entry ``field`` of ``index`` ("u" or "i") was written at."""
    found = broker.client.hget(broker.keys.uniq if index == "u" else broker.keys.ids, field)
    assert found is not None
    return float(str(found).split(" ")[1])


def test_an_entry_written_with_its_stored_task_is_dated_by_the_call(split: RedisBroker) -> None:
    """Joined on one server, an entry whose task the same call stored holds the call's ``now``: no
    enqueue of that task can be on its way, which is all an entry's age tells. Taken in a call of its
    own (as on a cluster) it holds the server's time. A one-task call whose entry is held refuses with
    take's answers all the same (its entries read from the enqueue's arguments)."""
    joined = split.joins_slots
    assert split.enqueue([task("0~a")], NOW) == [None]
    assert split.enqueue([custom("order-1", "a", unique_key="u")], NOW) == [None]
    assert split.enqueue([task("1~a", unique_key="v"), task("2~a", unique_key="w")], NOW) == [None, None]
    for index, field in (("i", "order-1"), ("u", "u"), ("u", "v"), ("u", "w")):
        written = since(split, index, field)
        assert written == NOW if joined else abs(written - time.time()) < 60
    assert split.enqueue([custom("order-2", "a", unique_key="u")], NOW) == ["order-1"]
    assert entry(split, "order-2") is None  # its task refused by its key: the id freed
    assert holder(split, "u") == "order-1"
