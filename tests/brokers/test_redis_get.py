"""A ``get`` is one command sent (``get.lua``), the status poll's cost (``TaskHandle.result`` polls it).

``MONITOR`` on a server of the test's own records the commands clients send (a script's own commands
come from "lua"): between two ``ECHO`` markers, a ``get`` must send one ``FCALL`` of ``get`` and nothing
else, for a generated id (its slot is in the id), a custom id (on one server the script reads its entry
in the namespace slot, then the task), an unknown id and layout 4's one slot; where calls are one per
slot (a cluster), a custom id's entry is read first, one command more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import pytest
import redis

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys, Keys5
from conveyor.brokers.redis.scripts import build_library
from conveyor.model import BrokerPolicy, NewTask, TaskState
from conveyor.testing.redis_server import RedisServer

from .split import PerSlotBroker

NOW = 1_000_000.0

T = TypeVar("T")

_LINE = re.compile(r"^\S+ \[\d+ (\S+)\] (.*)$")
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def sent_by_clients(server: RedisServer, action: Callable[[], T]) -> tuple[list[tuple[str, list[str]]], T]:
    """The commands clients sent (not a script's own) while ``action()`` ran, each as the client's
    address and its arguments, and what ``action()`` returned."""
    monitor = redis.Connection(host="127.0.0.1", port=server.port)  # type: ignore[no-untyped-call]
    reader = server.client()
    try:
        monitor.send_command("MONITOR")  # type: ignore[no-untyped-call]
        assert monitor.read_response() in ("OK", b"OK")
        reader.echo("start-of-get")
        answer = action()
        reader.echo("end-of-get")
        commands: list[tuple[str, list[str]]] = []
        started = False
        while True:
            match = _LINE.match(str(monitor.read_response()))
            if match is None or match.group(1) == "lua":
                continue
            args = _ARG.findall(match.group(2))
            if [arg.upper() for arg in args[:1]] == ["ECHO"]:
                if args[1] == "end-of-get":
                    return commands, answer
                started = args[1] == "start-of-get"
            elif started:
                commands.append((match.group(1), args))
    finally:
        monitor.disconnect()  # type: ignore[no-untyped-call]
        reader.close()


def new_task(task_id: str, queue: str) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]")


@pytest.mark.parametrize("layout", ["layout 5", "layout 4"])
def test_a_get_sends_one_command_on_one_server(server: RedisServer, layout: str) -> None:
    config = RedisConfig.from_url(server.namespace_url())
    keys = Keys(config.namespace) if layout == "layout 4" else Keys5(config.namespace)
    broker = RedisBroker(config, BrokerPolicy(), keys=keys)
    try:
        suffix = broker.id_suffixes()
        generated = "g1" + (suffix("emails") if suffix else "")
        assert broker.enqueue([new_task(generated, "emails"), new_task("order-7", "emails")], NOW) == [None, None]
        function = f"conveyor_{build_library()[0]}_get"
        for task_id, found in ((generated, True), ("order-7", True), ("unknown", False), ("gone~emails", False)):
            broker.get(task_id, NOW)  # connected, the library loaded: only the read is left
            commands, record = sent_by_clients(server, partial(broker.get, task_id, NOW))
            assert [args[:2] for _, args in commands] == [["FCALL", function]], (task_id, commands)
            assert (record is not None) == found, task_id
            assert record is None or (record.id == task_id and record.state is TaskState.PENDING)
    finally:
        broker.close()


def test_a_get_of_a_custom_id_reads_its_entry_first_where_calls_are_one_per_slot(server: RedisServer) -> None:
    """As on a cluster, where the entry (namespace slot) and the task (queue slot) are in two slots:
    both sent on the connection the broker sends its calls on (``Connections``, ``ClusterCalls``)."""
    config = RedisConfig.from_url(server.namespace_url())
    broker = PerSlotBroker(config, BrokerPolicy(), keys=Keys5(config.namespace))
    try:
        assert broker.enqueue([new_task("order-7", "emails"), new_task("g1~emails", "emails")], NOW) == [None, None]
        for task_id, expected in (("order-7", ["HMGET", "FCALL"]), ("g1~emails", ["FCALL"])):
            broker.get(task_id, NOW)
            commands, _ = sent_by_clients(server, partial(broker.get, task_id, NOW))
            assert [args[0].upper() for _, args in commands] == expected, (task_id, commands)
            # the entry on the broker's own connection, as the call (redis-py's client: dearer per command)
            assert len({source for source, _ in commands}) == 1, commands
    finally:
        broker.close()
