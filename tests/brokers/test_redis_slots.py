"""Every script call stays in the slots it is told (issue 33, stage A of the per-queue layout).

The broker runs on a real server with key names whose every queue has a slot of its own, apart from
the namespace slot (a standalone server does not check slots, so the calls run as they would on a
cluster of such slots); ``MONITOR`` records each ``FCALL`` and the commands its script ran, and every
key a script touched must be of the queue slot it declared (or, for an enqueue in layout 4, the
namespace slot's registry and unique keys, the same slot there); ``release`` and ``take`` (of
``NAMESPACE_ONLY``) touch the unique keys alone. The steps of the calls split in two (a queue
slot's call, the registry written by the broker around it) are driven one by one with another
call in between, and with a crash in between, by the tests at the end.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.calls import one_task_args
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.faults import Refused
from conveyor.brokers.redis.keys import Keys, keyslot
from conveyor.brokers.redis.scripts import NAMESPACE_ONLY, OPERATIONS, build_library, new_token
from conveyor.errors import ConveyorError
from conveyor.model import BrokerPolicy, Outcome, QueueSettings, TaskState
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer

from .split import NOW, PerSlotBroker, SplitKeys, task


@dataclass
class Call:
    """One ``FCALL`` as ``MONITOR`` showed it, and the keys of the commands its script ran."""

    operation: str
    declared: list[str]
    touched: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)  # the `seq` keys of further slots among its arguments


_LINE = re.compile(r"^\S+ \[\d+ (\S+)\] (.*)$")
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def recorded_calls(monitor: redis.Connection, reader: redis.Redis, marker: str, version: str) -> list[Call]:
    """The script calls ``monitor`` saw until the ``ECHO marker`` line; keys found by ``COMMAND GETKEYS``."""
    calls: list[Call] = []
    while True:
        line = str(monitor.read_response())
        match = _LINE.match(line)
        if match is None:
            continue
        source, args = match.group(1), _ARG.findall(match.group(2))
        if args == ["ECHO", marker] or args == ["echo", marker]:
            return calls
        if source != "lua":
            if args and args[0].upper() == "FCALL":
                operation = args[1].removeprefix(f"conveyor_{version}_")
                numkeys = int(args[2])
                joined = [arg for arg in args[3 + numkeys :] if arg.startswith("{") and arg.endswith(":seq")]
                calls.append(Call(operation, args[3 : 3 + numkeys], joined=joined))
            continue
        try:
            keys = reader.command_getkeys(*args)
        except redis.ResponseError:  # a command without keys (TIME)
            keys = []
        calls[-1].touched.extend(str(key) for key in keys)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def run_every_operation(broker: RedisBroker, url: str) -> None:
    """Every operation at least once, on tasks of two queues; checks that the broker still behaves."""
    broker.subscribe(lambda event: None)  # scripts then make events (SPUBLISH on the queue's channel)
    broker.configure_queue(QueueSettings("a", max_size=100, aging=1.0))
    broker.configure_queue(QueueSettings("b", concurrency=5))
    broker.set_paused("b", True)
    broker.set_paused("b", False)
    assert broker.enqueue([task("1~a")], NOW) == [None]  # refused without the namespace slot: a's first task
    assert broker.enqueue([task("1~a")], NOW) == ["1~a"]  # in the queue slot alone
    batch = [
        task("2~a"),
        task("3~b"),
        task("4~b", unique_key="u"),
        task("5~a", run_at=NOW + 10),
        task("6~b", expires_at=NOW + 1000),
        task("7~b", unique_key="u"),  # a duplicate of 4~b by its unique key
    ]
    assert broker.enqueue(batch, NOW) == [None, None, None, None, None, "4~b"]
    claimed = {record.id: record for record in broker.claim(["a", "b"], NOW, 30.0, limit=10)}
    assert sorted(claimed) == ["1~a", "2~a", "3~b", "4~b", "6~b"]
    assert broker.extend("3~b", claimed["3~b"].lease_token or "", NOW, 30.0) is not None
    outcomes = [
        Outcome("1~a", claimed["1~a"].lease_token or "", "complete", result="1"),
        Outcome("3~b", claimed["3~b"].lease_token or "", "archive", error="no"),
        Outcome("2~a", claimed["2~a"].lease_token or "", "retry", error="again", run_at=NOW + 5),
        Outcome("4~b", claimed["4~b"].lease_token or "", "release"),
    ]
    assert broker.settle(outcomes, NOW) == [True, True, True, True]
    assert broker.promote(NOW + 20) == 2  # 2~a (retry) and 5~a (scheduled), from the slot of a
    assert broker.reap(NOW + 100) == 1  # 6~b's lease, in the slot of b
    assert [record.id for record in broker.list_tasks("a", TaskState.PENDING, NOW + 100)] == ["2~a", "5~a"]
    counts = {info.name: info.counts["total"] for info in broker.queues(NOW + 100)}
    assert counts == {"a": 3, "b": 3}
    record = broker.get("1~a", NOW + 100)
    assert record is not None and record.state is TaskState.COMPLETED
    assert {row.queue for row in broker.history(int(NOW // 60), int(NOW // 60))} == {"a", "b"}
    broker.run_now("3~b", NOW + 100)
    broker.archive("5~a", NOW + 100)
    again = broker.claim(["b", "a"], NOW + 100, 30.0, limit=1)
    assert [record.queue for record in again] == ["b"]
    assert broker.cancel(again[0].id, NOW + 100) is TaskState.ARCHIVED
    broker.delete("1~a", NOW + 100)
    assert broker.purge("b", TaskState.PENDING, NOW + 100) == 2
    assert not broker.client.hexists(broker.keys.uniq, "u")  # 4~b's unique key, freed by release.lua
    assert broker.wait_for_work(["a", "b"], 0.01)  # the token enqueues left in the wake list of a or b
    assert broker.clean(NOW + 10**8) == 2  # 5~a and the task cancelled in b, past keep_until
    assert broker.forget_queue("b") == 0
    assert broker.enqueue([task("9~b", unique_key="u")], NOW + 100) == [None]  # 4~b's key, freed by the purge
    waiting = RedisBroker(RedisConfig.from_url(url + "?wait_replicas=1&wait_timeout=10"), keys=broker.keys)
    try:  # no replica confirms: the enqueue is withdrawn (withdraw.lua)
        with pytest.raises(ConveyorError):
            waiting.enqueue([task("8~a")], NOW)
    finally:
        waiting.close()


@pytest.mark.parametrize("layout", ["split", "split, joined", "layout 4"])
def test_every_script_touches_only_the_slots_it_declares(server: RedisServer, layout: str) -> None:
    """``split``: every queue in a slot of its own (layout 5), one call per slot as on a cluster;
    ``split, joined``: the same on one server, where a call over queues of several slots is one,
    touching the slots whose ``seq`` keys its arguments name; ``layout 4``: every call in one slot."""
    config = RedisConfig.from_url(server.url)
    keys = Keys(config.namespace) if layout == "layout 4" else SplitKeys(config.namespace)
    kind = PerSlotBroker if layout == "split" else RedisBroker
    broker = kind(config, BrokerPolicy(max_stalls=2), keys=keys)
    reader = server.client()
    monitor = redis.Connection(host="127.0.0.1", port=server.port)  # type: ignore[no-untyped-call]
    try:
        monitor.send_command("MONITOR")  # type: ignore[no-untyped-call]
        assert monitor.read_response() in ("OK", b"OK")
        run_every_operation(broker, server.url)
        reader.echo("end-of-calls")
        calls = recorded_calls(monitor, reader, "end-of-calls", build_library()[0])
    finally:
        monitor.disconnect()  # type: ignore[no-untyped-call]
        reader.close()
        broker.close()
    # layout 4 checks unique keys in the enqueue script itself: it never claims them with `take`; split
    # slots on one server take and enqueue in one call, `take_enqueue` (`take` alone only to take an
    # entry over), never on a cluster; the move from layout 4 runs only where layout 4 holds data
    # (test_redis_upgrade.py)
    moves = {"upgrade", "upgrade_drop", "upgrade_slot"}
    taking = {"layout 4": {"take", "take_enqueue"}, "split": {"take_enqueue"}, "split, joined": {"take"}}
    unused = moves | taking[layout]
    assert {call.operation for call in calls} == set(OPERATIONS) - unused
    enqueues = [call for call in calls if call.operation == "enqueue"]
    # refused for a's registration, then sent again: with both slots in layout 4, else in a's slot alone
    # with its forget counter (the broker registered it in between)
    assert [len(call.declared) for call in enqueues][:3] == ([1, 2, 1] if layout == "layout 4" else [1, 1, 1])
    if layout != "layout 4":  # no call declares two slots: unique keys are claimed by `take` first
        assert all(len(call.declared) == 1 and keys.uniq not in call.touched for call in enqueues)
    namespace_keys = {keys.queues, keys.uniq, keys.ids}
    slots_used = set()
    joined: set[str] = set()
    for call in calls:
        if call.operation in NAMESPACE_ONLY:
            assert call.declared == [keys.queues], call
            kept = {key for key in call.touched if key.startswith(keys.sent(""))}  # a take's answer, for a repeat
            assert set(call.touched) - kept <= {keys.uniq, keys.ids}, call
            continue
        # an enqueue in layout 4 declares the namespace slot (the same slot) when it needs it, and a
        # take joined to its enqueue (one server) always
        if call.operation == "take_enqueue":
            assert len(call.declared) == 2, call
        else:
            assert len(call.declared) in ({1, 2} if call.operation == "enqueue" and layout == "layout 4" else {1}), call
        both = len(call.declared) == 2
        prefix = call.declared[0].removesuffix("seq")
        assert call.declared[0] == prefix + "seq", call
        if both:
            assert call.declared[1] == keys.queues, call
        slots_used.add(prefix)
        prefixes = (prefix, *(key.removesuffix("seq") for key in call.joined))
        declared_slots = {keyslot(key) for key in (*call.declared, *call.joined)}
        for key in call.touched:
            assert key.startswith(prefixes) or (both and key in namespace_keys), (call.operation, key)
            assert keyslot(key) in declared_slots, (call.operation, key)
        joined.update({call.operation} if call.joined else set())
    assert slots_used == {keys.queue_prefix("a"), keys.queue_prefix("b")}
    assert (len(slots_used) == 1) is (layout == "layout 4")
    # on one server the calls over the queues of both slots are one each
    assert joined == ({"claim", "promote", "reap", "stats"} if layout == "split, joined" else set())


@pytest.mark.parametrize("crash", [False, True])
def test_forget_queue_never_unlists_a_queue_an_enqueue_brought_back(server: RedisServer, crash: bool) -> None:
    """``forget_queue``'s steps (mark in the queue slot, SREM in the namespace slot, finish) with an
    enqueue of the queue between the mark and the SREM: its SADD comes first and is undone, yet the
    queue ends listed: by the finish, or, when the forget dies before its finish (``crash``), by the
    next enqueue, which registers the queue again while the mark holds."""
    config = RedisConfig.from_url(server.url)
    broker = RedisBroker(config, keys=SplitKeys(config.namespace))
    try:
        broker.configure_queue(QueueSettings("a", max_size=10))
        marker = broker._forget_mark("a")
        assert isinstance(marker, str)
        assert broker.enqueue([task("1~a")], NOW) == [None]
        assert broker.client.sismember(broker.keys.queues, "a")
        broker._unregister("a")
        if not crash:
            broker._forget_finish("a", marker)
            assert broker.client.sismember(broker.keys.queues, "a")
            assert broker.enqueue([task("2~a")], NOW) == [None]
        else:
            assert not broker.client.sismember(broker.keys.queues, "a")
            assert broker.enqueue([task("2~a")], NOW) == [None]
            assert broker.client.sismember(broker.keys.queues, "a")
            broker._unregister("a")  # while the mark holds, every enqueue lists the queue again
            assert broker.enqueue([task("3~a")], NOW) == [None]
        assert broker.client.sismember(broker.keys.queues, "a")
        assert [info.name for info in broker.queues(NOW)] == ["a"]
        assert broker.forget_queue("a") == (3 if crash else 2)
    finally:
        broker.close()


def test_a_mark_of_a_forget_that_died_is_taken_over(server: RedisServer) -> None:
    """A mark past its deadline (the forget died between its steps) is removed by the next enqueue,
    which then sets ``kn`` again: later enqueues need the namespace slot no longer."""
    config = RedisConfig.from_url(server.url + "?socket_timeout=0.05")
    broker = RedisBroker(config, keys=SplitKeys(config.namespace))
    try:
        assert broker.enqueue([task("1~a")], NOW) == [None]
        broker.delete("1~a", NOW)
        assert isinstance(broker._forget_mark("a"), str)  # holds 0.1 s
        settings = broker.keys.slot(broker.keys.queue_prefix("a")).settings("a")
        enqueued = itertools.count(2)

        def taken_over() -> bool:
            assert broker.enqueue([task(f"{next(enqueued)}~a")], NOW) == [None]
            return not broker.client.hexists(settings, "fg")

        poll_until(taken_over, message="the mark taken over")
        assert broker.client.hget(settings, "kn") == "1"
    finally:
        broker.close()


def test_an_enqueue_whose_registration_a_forget_undid_registers_again(server: RedisServer) -> None:
    """An enqueue in its queue slot alone, refused for its queue's registration: the broker SADDs the
    queue, but a whole ``forget_queue`` runs before the call is sent again (its SREM undoes the SADD).
    The call sent again with the forget counter of the refusal is refused once more, so the broker
    registers the queue again: the queue ends listed with its task."""
    config = RedisConfig.from_url(server.url)
    broker = RedisBroker(config, keys=SplitKeys(config.namespace))
    prefix, args = broker.keys.queue_prefix("a"), one_task_args(task("1~a"))
    try:
        broker.configure_queue(QueueSettings("a"))
        with pytest.raises(Refused) as refused:
            broker._invoke("enqueue", prefix, repr(NOW), args, namespace=False)
        assert refused.value.text == "CONVEYOR_NAMESPACE a 0"
        broker._register("a")
        assert broker.forget_queue("a") == 0
        assert not broker.client.sismember(broker.keys.queues, "a")
        with pytest.raises(Refused) as again:  # the SADD it stands for was undone
            broker._invoke("enqueue", prefix, repr(NOW), args, namespace=False, proof=" a 0")
        assert again.value.text == "CONVEYOR_NAMESPACE a 2"
        assert broker._enqueue_here(prefix, repr(NOW), args, new_token()) == ""
        assert broker.client.sismember(broker.keys.queues, "a")
        assert [info.name for info in broker.queues(NOW)] == ["a"]
        assert broker.enqueue([task("2~a")], NOW) == [None]  # kn set: in the queue slot at once
    finally:
        broker.close()
