"""A growing backlog on each backend: bytes per task, enqueue rate and claim latency as it grows.

    .venv/bin/python -m bench.backlog [--levels 10000,100000,1000000]
        [--backends redis,cluster,partitioned,sqlite] [--partitions 6] [--batch 1000] [--singles 100]
        [--batches 10] [--batch-size 100] [--ids app] [--reps 3] [--markdown docs/benchmarks.md]

Issue 33 asks whether a task costs the same with 10k, 100k and 1M tasks queued. For each backend (one
private Redis-compatible server, a private 3-master cluster, the same cluster with the queue in
``--partitions`` partitions, a SQLite file in a temporary directory), tasks with 16-byte payloads are
enqueued in batches (``--batch`` a call, through ``Broker.enqueue``) into one queue until the backlog
reaches each level. Ids are made as the app makes them, the queue's routing suffix included where the
broker asks for one (``LabelsIds``: Redis, a slot per queue; asked per batch, as ``enqueue_many`` asks:
a partitioned queue's batch goes to as few partitions as its calls need); without it each task would be a custom
id, with an entry in the namespace slot and a round trip more per chunk, which no app pays. On the
cluster one queue sits in one slot, so on one master; ``partitioned`` spreads it over the masters
(``QueueSettings.partitions``), and the report says how evenly. At each level it reads:

* **bytes per task**: the store's growth since it was empty (after the scripts were loaded) over the
  tasks stored: ``INFO memory`` ``used_memory`` (summed over the cluster's masters), or the SQLite
  file plus its WAL after a ``TRUNCATE`` checkpoint (outside the timed calls). Where the bytes sit
  (master by master, or file and WAL) is reported too;
* **enqueue rate**: tasks enqueued to reach this level from the previous one over the time spent in
  ``enqueue`` calls (building the ``NewTask`` objects is not timed), and the CPU each of them cost the
  store: the server's (``INFO cpu`` deltas, summed over masters) or, for SQLite, which runs in the
  enqueuing process, that process's CPU in the ``enqueue`` calls. Unlike the rate, it does not count
  the time other processes on a shared machine take;
* **claim latency**: ``--singles`` calls of ``claim(limit=1)`` and ``--batches`` calls of
  ``claim(limit=--batch-size)``, the calls a worker makes, each timed alone; every claimed task is
  then settled ``complete`` without retention (untimed), which deletes it, so the next level is
  filled from a backlog that lost only those.

``--reps`` passes run the backends in turn, each pass starting from an empty store; the report gives
the median bytes and rates (with the rates' range) and latency percentiles over every pass's calls.
Servers are started on free 127.0.0.1 ports by ``conveyor.testing`` and stopped by their PIDs, one
backend after another, so a backend's memory is gone before the next starts. ``--markdown`` rewrites
the "Backlog" section of that file (``docs/benchmarks.md``), leaving the rest as it is.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.backlog_report import BACKENDS, Level, Run, markdown_section, merge, splice_section, table
from bench.server import cpu_model
from conveyor.brokers import open_broker
from conveyor.brokers.base import Broker, LabelsIds
from conveyor.ids import new_task_id
from conveyor.model import BrokerPolicy, NewTask, Outcome, QueueSettings, TaskRecord
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

__all__ = ["main", "measure_backend"]

NOW = 1_000_000.0
QUEUE = "backlog"
PAYLOAD = '[["0123456789"]]'  # 16 bytes of JSON text, as the issue asks
LEASE = 300.0

#: A store's size in bytes, part by part (masters, or file and WAL), read at the moment of the call.
Sizer = Callable[[], list[int]]


@dataclass(frozen=True)
class Store:
    """A backend's store while it runs: its URL, how to read its size, and its server's CPU."""

    url: str
    sizes: Sizer
    parts: list[str]
    detail: str
    server_cpu: Callable[[], float] | None  # seconds, summed over masters; None: it runs in this process


def _used_memory(server: RedisServer) -> int:
    return int(server.info("memory")["used_memory"])


def _cpu(servers: Sequence[RedisServer]) -> float:
    fields = [server.info("cpu") for server in servers]
    return sum(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]) for info in fields)


def _version(server: RedisServer) -> str:
    info = server.info("server")
    return f"{info.get('server_name', 'redis')} {info.get('valkey_version') or info['redis_version']}"


@contextmanager
def _redis(partitions: int) -> Iterator[Store]:
    with RedisServer() as server:
        sizes = lambda: [_used_memory(server)]  # noqa: E731
        yield Store(server.namespace_url(), sizes, ["server"], _version(server), lambda: _cpu([server]))


@contextmanager
def _cluster(partitions: int) -> Iterator[Store]:
    with LocalCluster(masters=3) as cluster:
        masters = list(cluster.masters)
        parts = [f"master {i + 1}" for i in range(len(masters))]
        spread = f", the queue in {partitions} partitions" if partitions > 1 else ""
        detail = f"{_version(masters[0])}, 3 masters, no replicas{spread}"
        sizes = lambda: [_used_memory(m) for m in masters]  # noqa: E731
        yield Store(cluster.namespace_url(), sizes, parts, detail, lambda: _cpu(masters))


@contextmanager
def _sqlite(partitions: int) -> Iterator[Store]:
    directory = Path(tempfile.mkdtemp(prefix="conveyor-backlog-"))
    path = directory / "backlog.db"

    def sizes() -> list[int]:
        # Every page into the file first: the WAL keeps its high-water size after a checkpoint (1000
        # pages by default), so without this a small backlog's bytes would be mostly WAL.
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return [p.stat().st_size if p.exists() else 0 for p in (path, path.with_name(path.name + "-wal"))]

    try:
        detail = f"a file, SQLite {sqlite3.sqlite_version}, defaults"
        yield Store(f"sqlite:///{path}", sizes, ["file", "WAL"], detail, None)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


#: Each backend's store, and how many partitions its queue has (``None``: ``--partitions``).
_STORES: dict[str, tuple[Callable[[int], AbstractContextManager[Store]], int | None]] = {
    "redis": (_redis, 1),
    "cluster": (_cluster, 1),
    "partitioned": (_cluster, None),
    "sqlite": (_sqlite, 1),
}


def _ids(kind: str) -> Iterator[str]:
    """Task ids: ``app`` as the app makes them (``conveyor.ids``: a millisecond prefix, then random
    bits), ``random`` (128 random bits in hex, the app's ids before they were time-ordered) or
    ``sequential`` (the same length, in enqueue order), to tell the ids' cost in an index apart."""
    if kind == "app":
        while True:
            yield new_task_id()
    if kind == "random":
        while True:
            yield os.urandom(16).hex()
    yield from (f"{number:032x}" for number in itertools.count())


def _tasks(ids: Iterator[str], count: int, suffix: Callable[[str], str] | None) -> list[NewTask]:
    """``count`` tasks; ``suffix``: the broker's routing suffix of an id by queue, added as the app adds it."""
    if suffix is None:
        return [NewTask(id=next(ids), name="job", queue=QUEUE, payload=PAYLOAD) for _ in range(count)]
    return [NewTask(id=next(ids) + suffix(QUEUE), name="job", queue=QUEUE, payload=PAYLOAD) for _ in range(count)]


def _timed_claims(broker: Broker, calls: int, limit: int) -> list[float]:
    """``calls`` claims of up to ``limit`` tasks, each timed alone (ms); every claimed task settled."""
    samples: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        claimed: list[TaskRecord] = broker.claim([QUEUE], NOW, LEASE, limit=limit)
        samples.append((time.perf_counter() - started) * 1000)
        if len(claimed) != limit:
            raise RuntimeError(f"claimed {len(claimed)} of {limit}: the backlog ran out")
        outcomes = [Outcome(r.id, r.lease_token or "", "complete", keep_for=0.0) for r in claimed]
        if not all(broker.settle(outcomes, NOW)):
            raise RuntimeError("a settle was refused")
    return samples


def measure_backend(
    backend: str,
    levels: Sequence[int],
    *,
    batch: int = 1000,
    singles: int = 100,
    batches: int = 10,
    batch_size: int = 100,
    ids: str = "app",
    partitions: int = 6,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> Run:
    """Fill one backend's queue to each of ``levels`` in turn and measure there (see the module's doc);
    ``partitions`` is the ``partitioned`` backend's count (the others keep their queue whole)."""
    opener, fixed = _STORES[backend]
    count = fixed or partitions
    with opener(count) as store:
        broker = open_broker(store.url, BrokerPolicy())
        try:
            if count > 1:
                broker.configure_queue(QueueSettings(QUEUE, partitions=count))
            broker.claim([QUEUE], NOW, LEASE, limit=1)  # first use: scripts loaded, schema made
            empty = store.sizes()
            new_ids = _ids(ids)
            run = Run(backend=backend, detail=store.detail, parts=store.parts, partitions=count)
            queued = 0
            for level in levels:
                added, spent, own = level - queued, 0.0, 0.0
                server0 = store.server_cpu() if store.server_cpu else 0.0
                while queued < level:
                    size = min(batch, level - queued)
                    # each batch labelled as enqueue_many labels it: a partitioned queue's goes to few partitions
                    suffix = broker.batch_id_suffixes(size) if isinstance(broker, LabelsIds) else None
                    chunk = _tasks(new_ids, size, suffix)
                    started, cpu0 = time.perf_counter(), time.process_time()
                    broker.enqueue(chunk, NOW)
                    spent += time.perf_counter() - started
                    own += time.process_time() - cpu0
                    queued += len(chunk)
                cpu = store.server_cpu() - server0 if store.server_cpu else own
                grown = [now - then for now, then in zip(store.sizes(), empty, strict=True)]
                single = _timed_claims(broker, singles, 1)
                batched = _timed_claims(broker, batches, batch_size)
                taken = singles + batches * batch_size
                rate = added / spent if spent else 0.0
                run.levels.append(Level(queued, grown, rate, single, batched, batch_size, cpu / added * 1e6))
                queued -= taken
                say(f"  {backend}: {level:,} queued measured")
        finally:
            broker.close()
    return run


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="10000,100000,1000000", help="backlog sizes, comma-separated")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"of {', '.join(BACKENDS)}")
    parser.add_argument("--partitions", type=int, default=6, help="the partitioned backend's partitions")
    parser.add_argument("--batch", type=int, default=1000, help="tasks per enqueue call")
    parser.add_argument("--singles", type=int, default=100, help="one-task claims timed per level")
    parser.add_argument("--batches", type=int, default=10, help="batch claims timed per level")
    parser.add_argument("--batch-size", type=int, default=100, help="tasks per batch claim")
    parser.add_argument("--ids", choices=("app", "random", "sequential"), default="app", help="task ids (see _ids)")
    parser.add_argument("--reps", type=int, default=3, help="passes over the backends (interleaved)")
    parser.add_argument("--markdown", type=Path, help="rewrite the Backlog section of this file")
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.levels.split(",") if level]
    args.backends = [name for name in args.backends.split(",") if name]
    unknown = [name for name in args.backends if name not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}: choose from {', '.join(BACKENDS)}")
    taken = args.singles + args.batches * args.batch_size
    if args.partitions < 2:
        parser.error("--partitions must be 2 or more (the cluster backend is the queue in one)")
    if args.levels != sorted(set(args.levels)) or not args.levels or args.levels[0] <= taken:
        parser.error(f"--levels must rise and start above the {taken} tasks each level's claims take")
    return args


def main(argv: list[str]) -> int:
    args = _args(argv)
    # SIGTERM unwinds like an exception, so the servers are stopped by PID on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    passes: dict[str, list[Run]] = {backend: [] for backend in args.backends}
    for number in range(args.reps):  # interleaved, so that the machine's drift spreads over every backend
        print(f"pass {number + 1} of {args.reps}", flush=True)
        for backend in args.backends:
            run = measure_backend(
                backend,
                args.levels,
                batch=args.batch,
                singles=args.singles,
                batches=args.batches,
                batch_size=args.batch_size,
                ids=args.ids,
                partitions=args.partitions,
            )
            passes[backend].append(run)
    runs = [merge(backend_passes) for backend_passes in passes.values()]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "duration_s": round(time.time() - started),
        "command": " ".join(["python -m bench.backlog", *argv]),
        "reps": args.reps,
        "batch": args.batch,
        "singles": args.singles,
        "batches": args.batches,
        "partitions": args.partitions,
        "machine": f"{os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}",
    }
    for line in table(runs):
        print(line)
    if args.markdown:
        text = args.markdown.read_text() if args.markdown.exists() else ""
        args.markdown.write_text(splice_section(text, markdown_section(runs, meta)))
        print(f"wrote the Backlog section of {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
