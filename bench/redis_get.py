"""``RedisBroker.get`` before and after ``get.lua``, paired: ``python -m bench.redis_get [--rounds N]
[--gets N] [--cluster] [--server valkey|redis-server]``.

Starts a private server (``--cluster``: a private 3-master cluster), enqueues a task with a generated
id and one with a custom id, and times, in each round, ``--gets`` reads of each id by the code before
(its slot from the id, a custom id's entry first, one ``HMGET``; then six reads in one pipeline,
``admin.task_item``) and as many by ``broker.get`` now (one ``FCALL`` of ``get.lua``; a custom id's
entry read first on a cluster), in alternating order, with ``--gets`` bare ``PING``s as the floor.
Prints per get the median over rounds of the wall time and of this process's CPU time (µs), the range
of the per-round ratio new/old (paired: both ran within the same second), and the commands the server
ran per get (``INFO commandstats`` deltas: a script's own commands count too).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, cast

from conveyor.brokers.redis import RedisBroker, admin
from conveyor.model import BrokerPolicy, NewTask, TaskRecord
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer, find_server_binary

__all__ = ["main", "old_get"]

NOW = 1_000_000.0


def old_get(broker: RedisBroker, task_id: str, now: float) -> TaskRecord | None:
    """``RedisBroker.get`` as it was before ``get.lua`` (the move's second try left out: no layout 4):
    a custom id's entry read through redis-py's client, then six reads in a redis-py pipeline."""
    keys, prefix = broker.keys, broker.keys.prefix
    if not keys.one_slot:
        prefix = keys.task_prefix(task_id)
        if "~" not in task_id:
            [entry] = cast("list[str | None]", broker.client.hmget(keys.ids, [task_id]))
            prefix = keys.namespace_prefix if entry is None else keys.label_prefix(entry.split(" ")[0])
    records = broker._records([admin.task_item(broker.client, broker.keys.slot(prefix), task_id)])
    if not records or (records[0].keep_until is not None and now >= records[0].keep_until):
        return None
    return records[0]


def _timed(run: Callable[[], Any], gets: int) -> tuple[float, float]:
    """(wall, CPU) seconds per call of ``run`` over ``gets`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(gets):
        run()
    return (time.perf_counter() - wall) / gets, (time.process_time() - cpu) / gets


def _commands(stats: Callable[[], dict[str, int]], run: Callable[[], Any], gets: int) -> dict[str, float]:
    """The commands the server ran per call of ``run`` (``INFO commandstats`` deltas)."""
    before = stats()
    for _ in range(gets):
        run()
    after = stats()
    return {name: (after[name] - before.get(name, 0)) / gets for name in after if after[name] != before.get(name, 0)}


@contextmanager
def _started(cluster: bool, binary: str) -> Iterator[tuple[str, Callable[[], dict[str, int]]]]:
    """A broker URL on a private server (or cluster), and a reader of its command counts."""
    if cluster:
        with LocalCluster(masters=3, binary=binary) as nodes:
            yield nodes.namespace_url("bench"), lambda: _counts(nodes.masters)
    else:
        with RedisServer(binary=binary) as server:
            yield server.namespace_url("bench"), lambda: _counts([server])


#: The reader's own commands (a connection of its own per read), left out of the counts.
_READER = ("info", "hello", "client|setinfo", "cluster|")


def _counts(servers: Sequence[RedisServer]) -> dict[str, int]:
    """Calls per command over ``servers``, summed."""
    counts: dict[str, int] = {}
    for server in servers:
        client = server.client()
        try:
            stats: dict[str, dict[str, int]] = client.info("commandstats")
        finally:
            client.close()
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            if not name.startswith(_READER):
                counts[name] = counts.get(name, 0) + int(value["calls"])
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_get", description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gets", type=int, default=500)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--server", default=None)
    args = parser.parse_args(argv)
    binary = find_server_binary(args.server)
    with _started(args.cluster, binary) as (url, stats):
        broker = RedisBroker.from_url(url, BrokerPolicy())
        try:
            suffix = broker.id_suffixes()
            generated = "g1" + (suffix("emails") if suffix else "")
            ids = (generated, "order-7")
            broker.enqueue(
                [NewTask(id=task_id, name="job", queue="emails", payload="[[], {}]") for task_id in ids], NOW
            )
            ping = broker.client.ping
            for label, task_id in (("generated id", generated), ("custom id", "order-7")):
                old, new = partial(old_get, broker, task_id, NOW), partial(broker.get, task_id, NOW)
                assert old() == new() is not None  # the same record either way
                rows: dict[str, list[tuple[float, float]]] = {"old": [], "new": [], "ping": []}
                for n in range(args.rounds):
                    runs: list[tuple[str, Callable[[], Any]]] = [("old", old), ("new", new)]
                    for name, run in [*(runs if n % 2 == 0 else runs[::-1]), ("ping", ping)]:
                        rows[name].append(_timed(run, args.gets))
                ratios = sorted(new_[0] / old_[0] for old_, new_ in zip(rows["old"], rows["new"], strict=True))
                print(f"{label} ({'cluster' if args.cluster else 'one server'}, {args.rounds} rounds of {args.gets}):")
                for name in ("old", "new", "ping"):
                    wall = statistics.median(w for w, _ in rows[name]) * 1e6
                    cpu = statistics.median(c for _, c in rows[name]) * 1e6
                    print(f"  {name:>4}: {wall:7.1f} µs wall, {cpu:7.1f} µs client CPU per call")
                middle = statistics.median(ratios)
                print(f"  new/old wall, per round: median {middle:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})")
                for name, run in (("old", old), ("new", new)):
                    counts = ", ".join(f"{cmd} {count:g}" for cmd, count in sorted(_commands(stats, run, 100).items()))
                    print(f"  {name:>4} commands per get: {counts}")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
