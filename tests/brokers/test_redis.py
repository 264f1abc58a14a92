"""Redis-specific behaviour of ``redis://`` (the shared semantics are the conformance suite's job).

Everything runs against private servers this suite starts (``redis_server`` / ``RedisServer``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import cast

import pytest
import redis

from conveyor.brokers import open_broker
from conveyor.brokers.base import Finding
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.calls import SPILL_AT, enqueue_args
from conveyor.brokers.redis.codec import (
    MEMBER_PREFIX,
    ROW_FIELDS,
    ROW_NAMES,
    decode_body,
    encode_body,
    encode_task,
)
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys5, Slot
from conveyor.brokers.redis.scripts import (
    EACH_CALL,
    LIBRARY,
    OPERATIONS,
    READ_ONLY,
    Scripts,
    build_library,
    read_source,
)
from conveyor.errors import BrokerError, BrokerUnavailable, ConfigurationError
from conveyor.model import ArchiveReason, BrokerPolicy, Event, NewTask, Outcome, QueueSettings, TaskRecord, TaskState
from conveyor.testing import SpyBroker, poll_until
from conveyor.testing.redis_server import RedisServer

pytestmark = pytest.mark.redis

NOW = 1_000_000.0


def crc16(data: bytes) -> int:
    """CRC16-XMODEM, as Redis Cluster computes key slots."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def keyslot(key: str) -> int:
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return crc16(key.encode()) % 16384


def slot_of(broker: RedisBroker, queue: str = "q") -> Slot:
    """The key names of ``queue``'s slot (layout 5: a slot per queue, ``{ns|queue}:v5:``)."""
    return broker.keys.slot(broker.keys.queue_prefix(queue))


def stored_row(broker: RedisBroker, task_id: str, queue: str = "emails") -> dict[str, str]:
    """A task's row as stored in its queue's slot, by field name."""
    row = cast("str", broker.client.hget(slot_of(broker, queue).rows, task_id)).split(" ", ROW_FIELDS - 1)
    return dict(zip(ROW_NAMES, row, strict=True))


def stored_body(broker: RedisBroker, task_id: str) -> tuple[str, str, str]:
    return decode_body(stored_row(broker, task_id)["b"])


def task(task_id: str, queue: str = "q", payload: str = "[[], {}]") -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload=payload)


@pytest.fixture
def broker(redis_url: str) -> Iterator[RedisBroker]:
    opened = RedisBroker.from_url(redis_url, BrokerPolicy(max_stalls=2))
    yield opened
    opened.close()


@pytest.fixture
def two(redis_url: str) -> Iterator[tuple[RedisBroker, RedisBroker]]:
    """A producer and a worker: two broker objects (two connection sets) on one namespace."""
    producer = RedisBroker.from_url(redis_url, BrokerPolicy())
    worker = RedisBroker.from_url(redis_url, BrokerPolicy())
    yield producer, worker
    producer.close()
    worker.close()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server for tests that stop it or change its configuration."""
    with RedisServer() as server:
        yield server


# -- keys and scripts ---------------------------------------------------------------------------


def test_every_key_of_a_queue_shares_its_queue_slot_and_the_rest_the_namespace_slot() -> None:
    """Layout 5: a script touches the keys of one slot, its queue's (or the namespace's alone)."""
    keys = Keys5("app")
    for queue in ("emails", "q.2", "a-queue-name-longer-than-sixteen"):
        slot = keys.slot(keys.queue_prefix(queue))
        touched = [
            *(slot.due, slot.leases, slot.expiring, slot.seq, slot.events, slot.cancels, slot.wake, slot.listening),
            *(slot.rows, slot.results, slot.lasterr, slot.limits, slot.tracebacks),
            slot.errors("t-1"),
            slot.settings(queue),
            slot.history(29_000_000),
            *(slot.queue(queue, part) for part in ("pending", "waiting", "groups", "archived:keep")),
        ]
        assert {keyslot(key) for key in touched} == {keyslot(slot.prefix)}
        assert all(key.startswith("{app|") for key in touched)
    shared = [keys.queues, keys.uniq, keys.ids, keys.workers, keys.worker_ttl, keys.worker_commands, keys.declared]
    assert {keyslot(key) for key in shared} == {keyslot(keys.prefix)}
    assert all(key.startswith("{app}:v5:") for key in shared)


def test_a_task_is_stored_as_one_row_its_body_last_and_the_absent_values_read_as_their_defaults(
    broker: RedisBroker,
) -> None:
    usual = task("usual", "emails")
    special = NewTask(id="special", name="job", queue="emails", payload="[[], {}]", priority=3, run_at=NOW + 5,
                      options='{"max_retries":1}')  # fmt: skip
    assert broker.enqueue([usual], NOW) == [None]
    assert broker.enqueue([special], NOW) == [None]
    row = stored_row(broker, "usual")
    assert (row["s"], row["m"][MEMBER_PREFIX:], row["q"], row["uk"], row["l"], row["ne"]) == (
        "pending", "usual", "emails", "-", "0", "0"
    )  # fmt: skip
    absent = ("x", "tk", "lx", "sa", "fa", "ku", "nr", "ar", "uu")
    assert [row[name] for name in absent] == ["-"] * len(absent)
    assert all(row[name] in ("0", "-") for name in ("a", "r", "st", "pr"))
    assert float(row["ea"]) == float(row["fd"]) == NOW
    assert stored_body(broker, "usual") == ("job", "{}", "[[], {}]")
    later = stored_row(broker, "special")
    assert (later["s"], int(float(later["pr"])), float(later["nr"])) == ("scheduled", 3, NOW + 5)
    assert stored_body(broker, "special") == ("job", '{"max_retries":1}', "[[], {}]")
    assert not broker.client.exists(slot_of(broker, "emails").results, slot_of(broker, "emails").lasterr)
    stored = broker.get("usual", NOW)
    assert stored is not None
    assert (stored.priority, stored.options, stored.enqueued_at, stored.first_due_at) == (0, "{}", NOW, NOW)
    late = broker.get("special", NOW)
    assert late is not None
    assert (late.priority, late.options, late.first_due_at) == (3, '{"max_retries":1}', NOW + 5)
    claimed = broker.claim(["emails"], NOW + 10, 30.0, limit=2)
    assert [(r.id, r.priority, r.options, r.first_due_at) for r in claimed] == [
        ("special", 3, '{"max_retries":1}', NOW + 5),
        ("usual", 0, "{}", NOW),
    ]


def test_scripts_build_keys_the_way_the_key_builder_names_them(broker: RedisBroker) -> None:
    """Calls declare one key (``seq``) and the scripts build every other name from its prefix: each of
    the queue slot's keys and the namespace slot's, written by some operation, is found under the name
    ``keys.py`` gives."""
    later = NewTask(id="b", name="job", queue="emails", payload="[]", run_at=NOW + 60, expires_at=NOW + 600,
                    unique_key="u", unique_until=NOW + 600)  # fmt: skip
    broker.enqueue([task("a", "emails")], NOW)
    broker.enqueue([later], NOW)
    assert [r.id for r in broker.claim(["emails"], NOW, 30.0)] == ["a"]
    client, keys, slot = broker.client, broker.keys, slot_of(broker, "emails")
    per_task = {slot.rows}
    per_queue = {slot.queue("emails", part) for part in ("scheduled", "active")} | {slot.settings("emails")}
    shared = {slot.due, slot.expiring, slot.leases, slot.seq, slot.wake}
    per_call = set(client.keys(slot.sent("*")))  # each enqueue's and claim's answer, kept a while for a repeat
    assert len(per_call) == 3
    assert set(client.keys(slot.prefix + "*")) == per_task | per_queue | shared | per_call
    # in layout 5 a take's too (custom ids, a unique key), but for a take joined to its enqueue (one server)
    taken = set(client.keys(keys.sent("*")))
    assert len(taken) == (0 if keys.one_slot or broker.joins_slots else 2)
    assert set(client.keys(keys.prefix + "*")) == {keys.queues, keys.uniq, keys.ids} | taken
    assert (
        client.zrange(slot.due, 0, -1)
        == client.zrange(slot.expiring, 0, -1)
        == client.zrange(slot.queue("emails", "scheduled"), 0, -1)
    )
    assert cast("str", client.hget(keys.uniq, "u")).split(" ")[0] == "b"  # "<id> <since>"
    assert cast("str", client.hget(keys.ids, "b")).split(" ")[0] == "emails"  # "<label> <since>"
    assert client.lrange(slot.wake, 0, -1) == ["1"]


def test_lua_scripts_ship_as_package_data_with_a_header() -> None:
    for name in OPERATIONS:
        source = read_source(name)
        header = source.split("\n\n")[0]
        assert source.startswith(f"-- {name}.lua:")
        for part in ("KEYS:", "ARGV:", "Returns:", "Transition:"):
            assert part in header, f"{name}.lua header lacks {part}"
    for name in LIBRARY:  # the shared helpers: each file says what it holds
        assert read_source(name).startswith(f"-- {name}.lua: ")
    assert "KEYS[1]" in read_source("_call").split("\n\n")[0]


def test_scripts_take_values_only_through_keys_and_argv() -> None:
    for name in (*OPERATIONS, *LIBRARY):
        assert not re.search(r"%\(|\{\{|\$\{", read_source(name)), f"{name}.lua looks templated"


def test_the_library_registers_every_operation_under_a_versioned_name() -> None:
    version, code = build_library()
    assert code.startswith(f"#!lua name=conveyor_{version}\n")
    for name in OPERATIONS:
        assert f"function_name = 'conveyor_{version}_{name}'" in code
    assert build_library() == (version, code)  # deterministic: every process names the same functions


def test_an_operation_defines_its_helpers_once_when_the_library_loads() -> None:
    """Code above ``EACH_CALL`` in an operation file runs at ``FUNCTION LOAD``: its functions are not
    built again on every call."""
    _, code = build_library()
    source = read_source("enqueue")
    helpers, marked, body = source.partition(EACH_CALL)
    assert marked and "local function store(" in helpers and "local function" not in body
    start = code.index("local op_enqueue\ndo\n")
    assert start < code.index("local function store(", start) < code.index("op_enqueue = function()\n", start)
    for name in OPERATIONS:  # without the marker, the whole file is the body
        assert f"op_{name} = function()\n" in code


def test_a_one_task_enqueue_sends_only_the_values_that_are_not_at_their_default() -> None:
    usual = task("a")
    assert list(enqueue_args([usual])) == [(1, "a", "q", encode_body("job", "{}", "[[], {}]"))]
    prioritized = NewTask(id="b", name="job", queue="q", payload="[]", priority=2)
    assert list(enqueue_args([prioritized])) == [(1, "b", "q", encode_body("job", "{}", "[]"), "2")]
    unique = NewTask(id="c", name="job", queue="q", payload="[]", unique_key="k", unique_until=NOW)
    assert list(enqueue_args([unique])) == [(1, "c", "q", encode_body("job", "{}", "[]"), "0", "", "", "=k", repr(NOW))]
    assert [args[0] for args in enqueue_args([usual, prioritized])] == [2]  # several: one JSON array


def test_tasks_sent_without_their_default_values_are_stored_with_them(broker: RedisBroker) -> None:
    tasks = [
        NewTask(id="b", name="job", queue="q", payload="[]", priority=2),
        NewTask(id="c", name="job", queue="q", payload="[]", options='{"max_retries":1}'),
        NewTask(id="d", name="job", queue="q", payload="[]", unique_key="k", unique_until=NOW + 9),
    ]
    for one in tasks:
        assert broker.enqueue([one], NOW) == [None]
    stored = {r.id: r for r in (broker.get(one.id, NOW) for one in tasks) if r is not None}
    assert (stored["b"].priority, stored["b"].options) == (2, "{}")
    assert (stored["c"].priority, stored["c"].options) == (0, '{"max_retries":1}')
    assert stored["d"].unique_key == "k"
    again = NewTask(id="e", name="job", queue="q", payload="[]", unique_key="k", unique_until=NOW + 20)
    assert broker.enqueue([again], NOW) == ["d"]  # within d's window
    assert broker.enqueue([again], NOW + 10) == [None]  # past it: d's unique_until was stored


def test_long_values_of_a_batch_travel_beside_its_json_array() -> None:
    short, long = task("a"), task("b", payload="[" + "1," * SPILL_AT + "1]")
    ((count, values, places, *spilled),) = enqueue_args([short, long, short])
    assert count == 3
    assert (places, spilled) == ("11", [encode_body("job", "{}", long.payload)])  # 2nd task's body: 8 + 3
    assert json.loads(str(values))[8 + 2] == ""  # taken out of the array
    assert list(enqueue_args([short, short])) == [(2, json.dumps([*encode_task(short)] * 2, separators=(",", ":")))]


@pytest.mark.parametrize("length", [SPILL_AT - 1, SPILL_AT, 5000])
def test_long_bodies_results_and_errors_of_a_batch_are_stored_whole(broker: RedisBroker, length: int) -> None:
    def text(tag: str) -> str:  # non-ASCII, newlines, quotes and a NUL: nothing of it may be lost or cut
        return (tag + ' "é€\n\u0000 ' * length)[:length]

    tasks = [task(f"t{i}", payload=text(f"p{i}")) for i in range(4)]
    assert broker.enqueue(tasks, NOW) == [None] * 4
    claimed = broker.claim(["q"], NOW, 30.0, limit=4)
    assert [(r.id, r.payload) for r in claimed] == [(t.id, t.payload) for t in tasks]
    complete, retry, archive, plain = claimed
    outcomes = [
        Outcome(complete.id, complete.lease_token or "", "complete", result=text("r")),
        Outcome(retry.id, retry.lease_token or "", "retry", error=text("e1"), run_at=NOW + 5),
        Outcome(archive.id, archive.lease_token or "", "archive", error=text("e2"), reason=ArchiveReason.FAILED),
        Outcome(plain.id, plain.lease_token or "", "complete", result="1"),
    ]
    assert broker.settle(outcomes, NOW) == [True] * 4
    stored = {t.id: broker.get(t.id, NOW) for t in tasks}
    done, retried, archived, small = (stored[t.id] for t in tasks)
    assert done is not None and (done.state, done.result, done.payload) == ("completed", text("r"), tasks[0].payload)
    assert retried is not None and (retried.state, retried.last_error) == ("retry", text("e1"))
    assert archived is not None and (archived.state, archived.last_error) == ("archived", text("e2"))
    assert small is not None and small.result == "1"
    (again,) = broker.claim(["q"], NOW + 5, 30.0, limit=4)  # the retry, with its error from the claim
    assert (again.id, again.last_error, again.payload) == ("t1", text("e1"), tasks[1].payload)
    assert [e.error for e in again.errors] == [text("e1")]


@pytest.mark.slow  # a server of its own
def test_the_library_is_loaded_once_and_again_after_function_flush(own_server: RedisServer) -> None:
    broker = RedisBroker.from_url(own_server.namespace_url(), BrokerPolicy())
    client = own_server.client()
    try:
        assert client.function_list() == []
        broker.enqueue([task("before")], NOW)
        libraries = [dict(zip(lib[::2], lib[1::2], strict=True)) for lib in client.function_list()]
        assert [lib["library_name"] for lib in libraries] == [f"conveyor_{Scripts().version}"]
        client.function_flush()
        assert broker.enqueue([task("after")], NOW) == [None]
        assert [r.id for r in broker.claim(["q"], NOW, 30.0, limit=5)] == ["before", "after"]
    finally:
        broker.close()


@pytest.mark.slow  # a server of its own
def test_read_only_operations_answer_on_a_server_out_of_memory(own_server: RedisServer) -> None:
    broker = RedisBroker.from_url(own_server.namespace_url(), BrokerPolicy())
    broker.enqueue([task("kept")], NOW)
    client = own_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) - 1024))
    try:
        assert {"get", "list", "stats"} == READ_ONLY
        assert [r.id for r in broker.list_tasks("q", TaskState.PENDING, NOW)] == ["kept"]
        kept = broker.get("kept", NOW)
        assert kept is not None and kept.state is TaskState.PENDING
        assert broker.queues(NOW)[0].counts["pending"] == 1
        with pytest.raises(BrokerError, match="out of memory"):
            broker.enqueue([task("refused")], NOW)
    finally:
        client.config_set("maxmemory", "0")
    assert broker.get("refused", NOW) is None
    broker.close()


# -- URLs and namespaces --------------------------------------------------------------------------


def test_open_broker_reads_namespace_and_timeouts_from_the_url(redis_server: RedisServer) -> None:
    broker = open_broker(f"{redis_server.url}?namespace=shop&socket_timeout=1.5&socket_connect_timeout=0.5")
    try:
        assert isinstance(broker, RedisBroker)
        assert (broker.keys.prefix, broker.keys.queue_prefix("q")) == ("{shop}:v5:", "{shop|q}:v5:")
        assert broker.config.socket_timeout == 1.5
        assert broker.config.socket_connect_timeout == 0.5
    finally:
        broker.close()


@pytest.mark.parametrize(
    "url",
    ["redis://h/0?namespace=bad{ns}", "redis://h/0?socket_timeout=-1", "redis://h/0?retries=x", "http://h",
     "redis://h:6379/x", "rediss://h/0/1", "redis://h/-1"],
)  # fmt: skip
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisConfig.from_url(url)


@pytest.mark.parametrize("path", ["", "/", "/0", "/15"])
def test_a_plain_url_names_its_database_by_number_or_not_at_all(path: str) -> None:
    assert RedisConfig.from_url(f"redis://h:6379{path}").seeds == [("h", 6379)]


@pytest.mark.parametrize("url", ["memory://x", "memory://?x=1", "memory:///tmp/q.db"])
def test_a_memory_url_takes_nothing_more(url: str) -> None:
    with pytest.raises(ConfigurationError, match="memory:// takes no host, path or options"):
        open_broker(url)
    open_broker("memory://").close()


def layout_1(client: redis.Redis, old: str) -> dict[str, str]:
    """A pending task as layout 1 kept it: a hash per task under ``{ns}:``."""
    client.hset(old + "t:old", mapping={"n": "job", "q": "q", "s": "pending", "m": "0000000000000001old", "p": "[]"})
    return {old + "t:old": "hash"}


def layout_2(client: redis.Redis, old: str) -> dict[str, str]:
    """A pending task as layout 2 kept it under ``{ns}:v2:``: its row in ``rows``, its body in ``bodies``."""
    row = f"pending 0000000000000001old q - 0 0 0 0 - - - - - 0 0 0 {NOW!r} {NOW!r} {NOW!r} - - - "
    client.hset(old + "rows", "old", row)
    client.hset(old + "bodies", "old", encode_body("job", "{}", "[]"))
    return {old + "rows": "hash", old + "bodies": "hash"}


def layout_3(client: redis.Redis, old: str) -> dict[str, str]:
    """A pending task as layout 3 kept it under ``{ns}:v3:``: its row, body included, in ``rows``."""
    row = f"pending 0000000000000001old q - 0 0 0 0 - - - - - 0 0 0 {NOW!r} {NOW!r} {NOW!r} - - - - "
    client.hset(old + "rows", "old", row + encode_body("job", "{}", "[]"))
    return {old + "rows": "hash"}


@pytest.mark.parametrize(("layout", "version"), [(layout_1, ""), (layout_2, "v2:"), (layout_3, "v3:")])
def test_an_earlier_layouts_task_in_the_same_namespace_is_neither_read_nor_changed(
    broker: RedisBroker, layout: Callable[[redis.Redis, str], dict[str, str]], version: str
) -> None:
    """Layout 1 kept a hash per task under ``{ns}:``, layout 2 a row and a body per task under ``{ns}:v2:``,
    layout 3 a row per task and a ``waiting`` member per pending task under ``{ns}:v3:``; this layout's
    keys carry ``v5`` (the move from layout 4 reads ``{ns}:v4:`` alone), so during a side-by-side
    upgrade the earlier version's workers keep their tasks and this version never pops or drops them."""
    client = broker.client
    old = "{" + broker.keys.namespace + "}:" + version
    legacy = layout(client, old)
    legacy |= {old + "q:q:pending": "zset", old + "q:q:waiting": "zset", old + "queues": "set"}
    client.zadd(old + "q:q:pending", {"0000000000000001old": 0})
    client.zadd(old + "q:q:waiting", {"0000000000000001old": NOW})
    client.sadd(old + "queues", "q")
    before = {key: client.dump(key) for key in legacy}
    broker.enqueue([task("new")], NOW)
    assert [r.id for r in broker.claim(["q"], NOW, 30.0, limit=5)] == ["new"]
    assert broker.get("old", NOW) is None
    assert broker.reap(NOW + 3600, 100) == 1 and broker.clean(NOW + 10**7, 100) == 0
    assert {key: client.type(key) for key in legacy} == legacy
    assert {key: client.dump(key) for key in legacy} == before


def test_namespaces_are_isolated(redis_server: RedisServer) -> None:
    one = RedisBroker.from_url(redis_server.namespace_url(), BrokerPolicy())
    two = RedisBroker.from_url(redis_server.namespace_url(), BrokerPolicy())
    try:
        one.enqueue([task("same-id")], NOW)
        assert two.get("same-id", NOW) is None
        assert two.queues(NOW) == []
        assert two.enqueue([task("same-id")], NOW) == [None]
        assert [r.id for r in one.claim(["q"], NOW, 30.0, limit=5)] == ["same-id"]
        assert two.get("same-id", NOW) is not None
        assert two.get("same-id", NOW).state is TaskState.PENDING  # type: ignore[union-attr]
        namespace = one.keys.namespace
        stored: list[str] = one.client.keys("{" + namespace + "[}|]*")  # type: ignore[assignment]
        assert one.keys.queues in stored and slot_of(one).rows in stored
        assert not any(namespace in key for key in cast("list[str]", one.client.keys("{" + two.keys.namespace + "*")))
    finally:
        one.close()
        two.close()


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.slow  # a server of its own
def test_calls_raise_broker_unavailable_quickly_when_the_server_is_down(own_server: RedisServer) -> None:
    url = own_server.namespace_url() + "&socket_connect_timeout=0.5&socket_timeout=1"
    broker = RedisBroker.from_url(url, BrokerPolicy())
    try:
        broker.enqueue([task("a")], NOW)
        own_server.stop()
        for call in (
            lambda: broker.enqueue([task("b")], NOW),
            lambda: broker.claim(["q"], NOW, 30.0),
            lambda: broker.get("a", NOW),
        ):
            started = time.monotonic()
            with pytest.raises(BrokerUnavailable):
                call()
            assert time.monotonic() - started < 3.0
    finally:
        broker.close()


@pytest.mark.slow  # a server of its own
def test_out_of_memory_is_a_clear_error_and_writes_nothing(own_server: RedisServer) -> None:
    broker = RedisBroker.from_url(own_server.namespace_url(), BrokerPolicy())
    try:
        broker.enqueue([task("first")], NOW)
        client = own_server.client()
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) - 1024))
        with pytest.raises(BrokerError, match="out of memory") as caught:
            broker.enqueue([task("second", payload="x" * 10_000)], NOW)
        assert not isinstance(caught.value, BrokerUnavailable)
        client.config_set("maxmemory", "0")
        assert broker.get("second", NOW) is None
        assert not client.hexists(slot_of(broker).rows, "second")
        assert [info.counts["pending"] for info in broker.queues(NOW)] == [1]
        client.close()
    finally:
        broker.close()


def test_a_garbage_payload_is_stored_and_claimed_untouched(broker: RedisBroker) -> None:
    broker.enqueue([task("junk", payload="\x00not json{")], NOW)
    (claimed,) = broker.claim(["q"], NOW, 30.0)
    assert claimed.payload == "\x00not json{"
    outcome = Outcome("junk", claimed.lease_token or "", "archive", error="undecodable payload", reason=None)
    assert broker.settle([outcome], NOW) == [True]
    assert broker.get("junk", NOW).state is TaskState.ARCHIVED  # type: ignore[union-attr]


def test_a_claimed_task_is_returned_exactly_as_stored(broker: RedisBroker) -> None:
    """The claim builds its records from the rows as they were before it (codec.decode_claimed, with
    positional arguments): every field must equal what ``get`` then reads back."""
    full = NewTask(
        id="full",
        name="job",
        queue="q",
        payload='[[1], {"a": 2}]',
        options='{"max_retries": 3}',
        priority=4,
        expires_at=NOW + 500,
        unique_key="key 1",
        unique_until=NOW + 100,
    )
    broker.enqueue([full, task("plain")], NOW)
    first = broker.claim(["q"], NOW, 30.0, limit=1)
    retry = Outcome("full", first[0].lease_token or "", "retry", error="Boom: once", run_at=NOW + 5, max_retries=2)
    assert broker.settle([retry], NOW) == [True]
    claimed = broker.claim(["q"], NOW + 10, 30.0, limit=5)  # "full" (due again, priority 4), then "plain"
    assert [r.id for r in claimed] == ["full", "plain"]
    for record in claimed:
        assert record == broker.get(record.id, NOW + 10)
    assert (claimed[0].attempts, claimed[0].retries, claimed[0].last_error) == (2, 1, "Boom: once")
    assert [e.error for e in claimed[0].errors] == ["Boom: once"]
    assert (claimed[0].max_retries, claimed[1].max_retries) == (2, None)


def test_a_recorded_retry_limit_goes_with_its_task(broker: RedisBroker) -> None:
    """``limits`` and ``tracebacks`` hold an entry only for a task with failures, and lose it with the task."""
    broker.enqueue([task("failed"), task("done")], NOW)
    first, second = broker.claim(["q"], NOW, 30.0, limit=2)
    outcomes = [
        Outcome(
            "failed",
            first.lease_token or "",
            "archive",
            error="Boom",
            reason=ArchiveReason.FAILED,
            max_retries=0,
            traceback="Traceback:\n  boom\n",
        ),
        Outcome("done", second.lease_token or "", "complete", result="1", keep_for=60),
    ]
    assert broker.settle(outcomes, NOW) == [True, True]
    slot = slot_of(broker)
    assert broker.client.hgetall(slot.limits) == {"failed": "0"}
    assert broker.client.hgetall(slot.tracebacks) == {"failed": "Traceback:\n  boom\n"}
    assert broker.get("failed", NOW).traceback == "Traceback:\n  boom\n"  # type: ignore[union-attr]
    broker.delete("failed", NOW)
    assert not broker.client.exists(slot.limits)
    assert not broker.client.exists(slot.tracebacks)


def test_unique_keys_with_spaces_escapes_and_newlines_hold_their_tasks(broker: RedisBroker) -> None:
    """A row's unique key field holds no whitespace (the body follows it): the codec escapes the key, and
    the scripts see only the escaped key, in rows and in the ``uniq`` index alike."""
    keys = ["a b", "a%20b", "a\nb", "100%"]
    first = [NewTask(id=f"t{i}", name="job", queue="q", payload="[]", unique_key=key, unique_until=NOW + 60)
             for i, key in enumerate(keys)]  # fmt: skip
    assert broker.enqueue(first, NOW) == [None] * len(keys)
    again = [NewTask(id=f"u{i}", name="job", queue="q", payload="[]", unique_key=key, unique_until=NOW + 60)
             for i, key in enumerate(keys)]  # fmt: skip
    assert broker.enqueue(again, NOW) == [f"t{i}" for i in range(len(keys))]
    assert [broker.get(f"t{i}", NOW).unique_key for i in range(len(keys))] == keys  # type: ignore[union-attr]
    claimed = broker.claim(["q"], NOW, 30.0, limit=10)
    assert [(r.id, r.unique_key) for r in claimed] == [(f"t{i}", key) for i, key in enumerate(keys)]
    assert all(record == broker.get(record.id, NOW) for record in claimed)


def test_a_task_row_deleted_under_a_live_lease_is_handled(broker: RedisBroker) -> None:
    broker.enqueue([task("gone"), task("kept")], NOW)
    gone, _kept = broker.claim(["q"], NOW, 30.0, limit=2)
    broker.client.hdel(slot_of(broker).rows, "gone")
    assert broker.get("gone", NOW) is None
    assert broker.extend("gone", gone.lease_token or "", NOW, 30.0) is None
    assert broker.settle([Outcome("gone", gone.lease_token or "", "complete")], NOW) == [False]
    assert broker.reap(NOW + 60, 100) == 1  # "kept" only; the orphan lease entry is dropped
    assert broker.get("kept", NOW + 60).state is TaskState.PENDING  # type: ignore[union-attr]
    assert broker.client.zcard(slot_of(broker).leases) == 0
    assert [r.id for r in broker.claim(["q"], NOW + 60, 30.0, limit=5)] == ["kept"]


def test_a_mangled_task_row_is_skipped_not_fatal(broker: RedisBroker) -> None:
    broker.enqueue([task("bad"), task("good")], NOW)
    broker.client.hset(slot_of(broker).rows, "bad", "garbage")
    claimed = broker.claim(["q"], NOW, 30.0, limit=5)
    assert "good" in [r.id for r in claimed]


# -- events, clock, preflight, wake-up ------------------------------------------------------------


def sockets_to(port: int) -> set[str]:
    """This process's open TCP connections to 127.0.0.1:``port``, by socket inode (from ``/proc``)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
        if target.startswith("socket:["):
            mine.add(target[len("socket:[") : -1])
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {row[9] for row in rows if row[2] == f"0100007F:{port:04X}" and row[9] in mine}


def test_close_closes_every_connection_the_broker_opened(redis_server: RedisServer, redis_url: str) -> None:
    before = sockets_to(redis_server.port)
    broker = RedisBroker.from_url(redis_url, BrokerPolicy())
    broker.subscribe(lambda event: None)  # the listeners' pub/sub connections
    broker.watch_cancels(lambda task_id: None)
    broker.server_clock()
    broker.preflight()
    busy = threading.Barrier(4)

    def use() -> None:  # four calls at once: four hot-path connections
        busy.wait()
        broker.enqueue([task(f"c{threading.get_ident()}")], NOW)
        broker.wait_for_work(["q"], 0.01)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sockets_to(redis_server.port) - before) >= 3
    listeners = [thread for thread in threading.enumerate() if thread.name.startswith("conveyor-redis-")]
    assert sorted(thread.name for thread in listeners) == ["conveyor-redis-cancels", "conveyor-redis-events"]
    broker.close()
    assert sockets_to(redis_server.port) - before == set()
    for listener in listeners:
        assert not listener.is_alive()  # it would reconnect


def test_events_reach_other_broker_objects_through_pub_sub(redis_url: str) -> None:
    producer = RedisBroker.from_url(redis_url, BrokerPolicy())
    listener = RedisBroker.from_url(redis_url, BrokerPolicy())
    seen: list[Event] = []
    lock = threading.Lock()

    def record(event: Event) -> None:
        with lock:
            seen.append(event)

    try:
        producer.configure_queue(QueueSettings("q"))  # registered: a listener starting now follows its slot
        listener.subscribe(record)
        producer.enqueue([task("e1")], NOW)
        (claimed,) = producer.claim(["q"], NOW, 30.0)
        producer.settle([Outcome("e1", claimed.lease_token or "", "complete")], NOW)
        poll_until(lambda: len(seen) == 3, message="three events from the other broker")
        assert [(e.task_id, e.old_state, e.new_state, e.queue, e.at) for e in seen] == [
            ("e1", None, "pending", "q", NOW),
            ("e1", "pending", "active", "q", NOW),
            ("e1", "active", "completed", "q", NOW),
        ]
    finally:
        producer.close()
        listener.close()


def test_own_events_are_delivered_before_the_call_returns(broker: RedisBroker) -> None:
    seen: list[Event] = []
    broker.subscribe(seen.append)
    broker.enqueue([task("mine")], NOW)
    assert [(e.task_id, e.new_state) for e in seen] == [("mine", "pending")]


def test_a_raising_subscriber_does_not_break_the_broker(broker: RedisBroker) -> None:
    def explode(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    broker.subscribe(explode)
    assert broker.enqueue([task("x")], NOW) == [None]


def test_server_clock_follows_the_server_time(broker: RedisBroker) -> None:
    clock = broker.server_clock()
    seconds, micros = broker.client.time()
    assert abs(clock() - (seconds + micros / 1e6)) < 0.5
    assert broker.server_clock() is clock


def test_preflight_finds_persistence_off_and_the_default_eviction_policy_ok(broker: RedisBroker) -> None:
    assert broker.preflight() == [
        Finding("maxmemory-policy", True, "noeviction"),
        Finding("persistence", False, "off (appendonly no, no save points): a restart loses every task"),
    ]


@pytest.mark.slow  # a server of its own
def test_preflight_warns_about_an_evicting_memory_policy(own_server: RedisServer) -> None:
    own_server.client().config_set("maxmemory-policy", "allkeys-lru")
    broker = RedisBroker.from_url(own_server.namespace_url(), BrokerPolicy())
    try:
        evicting = broker.preflight()[0]
        assert (evicting.name, evicting.ok) == ("maxmemory-policy", False)
        assert "'allkeys-lru'" in evicting.detail and "set it to 'noeviction'" in evicting.detail
    finally:
        broker.close()


@pytest.mark.slow  # a server of its own
def test_a_starting_worker_logs_the_preflight_warnings_once(
    own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    from conveyor import Conveyor

    own_server.client().config_set("maxmemory-policy", "allkeys-lru")
    spy = SpyBroker.from_url(own_server.namespace_url())
    app = Conveyor(broker=spy)
    worker = app.worker(poll_interval=0.05, registry_interval=0.05, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    with caplog.at_level("WARNING", logger="conveyor"):
        thread.start()
        try:
            poll_until(lambda: spy.count("register_worker") >= 3, message="three registry beats")
        finally:
            worker.stop()
            thread.join(timeout=30.0)
            app.close()
    evicting = [r for r in caplog.records if "allkeys-lru" in r.getMessage()]
    assert len(evicting) == 1 and evicting[0].levelname == "WARNING"  # at start, not at every beat
    assert any("preflight: persistence: off" in r.getMessage() for r in caplog.records)


def test_an_idle_worker_wakes_when_a_task_becomes_pending(two: tuple[RedisBroker, RedisBroker]) -> None:
    producer, worker = two
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(worker.wait_for_work(["q"], 3.0)))
    waiter.start()
    producer.enqueue([task("wake")], NOW)
    waiter.join()
    assert woke == [True]
    assert worker.wait_for_work(["q"], 0.05) is False


def test_an_idle_claim_on_the_server_clock_runs_at_the_servers_time_when_the_wake_arrives(
    two: tuple[RedisBroker, RedisBroker],
) -> None:
    producer, worker = two
    clock = worker.server_clock()
    got: list[TaskRecord] = []
    assert worker.claim_after_wait(["q"], clock, 30.0, 5, 0.05) == []  # nothing came: empty after the wait
    clock.offset -= 1000.0  # the client's idea of now is off; the queued claim must not use it
    waiter = threading.Thread(target=lambda: got.extend(worker.claim_after_wait(["q"], clock, 30.0, 5, 3.0)))
    waiter.start()
    producer.enqueue([task("w1")], time.time())
    waiter.join(timeout=5.0)
    assert [r.id for r in got] == ["w1"]
    record = got[0]
    assert record.state is TaskState.ACTIVE and record.lease_token and record.started_at is not None
    assert abs(record.started_at - time.time()) < 5.0  # the server's TIME, not clock()
    stored = worker.get("w1", time.time())
    assert stored is not None and stored.lease_expires_at == record.lease_expires_at == record.started_at + 30.0
    assert worker.settle([Outcome("w1", record.lease_token, "complete")], time.time()) == [True]


def test_an_idle_claim_with_an_injected_clock_claims_at_that_clock(two: tuple[RedisBroker, RedisBroker]) -> None:
    producer, worker = two
    got: list[TaskRecord] = []
    waiter = threading.Thread(target=lambda: got.extend(worker.claim_after_wait(["q"], lambda: NOW + 5, 30.0, 5, 3.0)))
    waiter.start()
    producer.enqueue([task("w2")], NOW)
    waiter.join(timeout=5.0)
    assert [(r.id, r.started_at, r.lease_expires_at) for r in got] == [("w2", NOW + 5, NOW + 35)]


def test_a_batch_larger_than_a_chunk_is_stored_in_order(broker: RedisBroker) -> None:
    from conveyor.brokers.redis.calls import ENQUEUE_CHUNK

    count = ENQUEUE_CHUNK * 2 + 7
    assert broker.enqueue([task(f"t{i}") for i in range(count)], NOW) == [None] * count
    claimed = broker.claim(["q"], NOW, 30.0, limit=count)
    assert [r.id for r in claimed] == [f"t{i}" for i in range(count)]


def test_a_worker_on_redis_keeps_two_claims_in_flight(redis_url: str) -> None:
    from conveyor import Conveyor, Worker, WorkerConfig

    spy = SpyBroker.from_url(redis_url)
    app = Conveyor(broker=spy)
    done: list[int] = []

    @app.task(queue="pipelined")
    def job(i: int) -> None:
        done.append(i)

    app.enqueue_many("job", [((i,), {}) for i in range(3000)], queue="pipelined")
    worker = Worker(
        app, WorkerConfig(queues=("pipelined",), concurrency=8, prefetch=8, poll_interval=0.05, freeze_heap=False)
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        poll_until(lambda: len(done) == 3000, timeout=60.0, message="3000 tasks done")
    finally:
        worker.stop()
        thread.join(timeout=30.0)
    assert worker.runtime is not None and worker.runtime.fetcher.claimers == 2  # the default on Redis
    assert sorted(done) == list(range(3000))  # each ran exactly once
    assert {call.thread for call in spy.calls_to("claim")} == {"conveyor-fetcher", "conveyor-fetcher-2"}  # both claimed
    assert app.stats()["pipelined"]["completed"] == 3000
    app.close()


@pytest.mark.parametrize(
    "url",
    ["redis://:s3cret@h:6379/db0", "redis://user:s3cret@h/0?retries=x", "redis://h/0?password=s3cret&bogus=1",
     "redis+cluster://u:s3cret@h:1/3", "redis://h/x?password=s3cret"],
)  # fmt: skip
def test_a_bad_url_is_quoted_without_its_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        RedisConfig.from_url(url)
    assert "s3cret" not in str(refused.value) and "h" in str(refused.value)
