"""Benchmark of the Redis broker against a private server on loopback (plain script, no pytest).

    .venv/bin/python -m bench.bench_redis [--tasks 100000] [--reps 1] [--server valkey|redis-server]

Measures, with full lease safety (every claim leases with a fencing token, every ack is fenced):
raw PING round trips/s from Python (the baseline), single enqueue/s (broker call, and through
``Conveyor.enqueue``), batch enqueue/s, drain/s with one process (batch claim + one settle call per
batch, and through the real ``Worker.run()`` runtime with no-op tasks), idle-to-running latency at 200
tasks/s (an idle worker in ``claim_after_wait``, as the runtime's fetcher waits) beside the PING round
trip at the same rate (its floor: idle processes on a VM wake slowly), and server memory per small
queued task. Issue 4's aims: drain >= 30,000/s, single enqueue >= 0.8x raw round trips, batch
enqueue > 150,000/s, latency p50 < 0.5 ms and p99 < 2 ms. It also reports the server's own time per task
(``FCALL`` time from ``INFO commandstats``) for one-task enqueues, batch enqueues and claim + settle: the
part of each figure that is Lua work rather than round trips.

The server is pinned to one core and this process to another (as ``python -m bench`` does). PING and
single enqueues are measured in alternating rounds and compared round by round (median of the
ratios): this machine's speed drifts between seconds, which a ratio of two separate runs would mix in.
It also drifts between minutes, by up to 2x in the throughputs (measured: one-process drain 19k and
41k/s in two runs a few minutes apart, unchanged code): ``--reps N`` measures every figure N times, one
run after another, each in a namespace of its own, and prints each figure's median, its range and in how
many runs it met its aim.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.measure import percentile
from bench.redis_report import Report, git_revision
from bench.server import choose_placement, cpu_model, server_version
from conveyor.app import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.model import BrokerPolicy, NewTask, Outcome
from conveyor.testing.redis_server import RedisServer, find_server_binary
from conveyor.worker import Worker, WorkerConfig


def task(i: int, queue: str = "bench") -> NewTask:
    return NewTask(id=f"{queue}-{i}", name="noop", queue=queue, payload="[[], {}]")


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def fcall_usec(broker: RedisBroker) -> float:
    """Server time spent in ``FCALL`` (every broker operation) since the server started, in µs."""
    stats = broker.client.info("commandstats").get("cmdstat_fcall")
    return float(stats["usec"]) if stats else 0.0


def server_time(broker: RedisBroker, work: Callable[[], int]) -> float:
    """Run ``work`` (returns how many tasks it handled): server µs per task, by ``INFO commandstats``.
    Machine speed moves both sides of a ratio alike; this figure shows where a round trip's time goes."""
    before = fcall_usec(broker)
    count = work()
    return (fcall_usec(broker) - before) / max(1, count)


def bench_single(broker: RedisBroker, url: str, n: int, rounds: int = 8) -> dict[str, tuple[float, float]]:
    """Alternating rounds of ``n // rounds`` PINGs, ``broker.enqueue`` of one task and ``Conveyor.enqueue``
    by name (the whole producer path): per kind, (median rate, median ratio to the PING round beside it)."""
    client = broker.client
    app = Conveyor(url)
    app.enqueue("noop", queue="appsingle")  # warm up (loads the library)
    counter = iter(range(10**9))
    calls: dict[str, Callable[[], object]] = {
        "ping": client.ping,
        "enqueue": lambda: broker.enqueue([task(next(counter), "single")], time.time()),
        "app": lambda: app.enqueue("noop", (1,), queue="appsingle"),
    }
    per_round = max(1, n // rounds)
    rates: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            rates[name].append(rate(per_round, time.perf_counter() - start))
    app.broker.close()
    return {
        name: (
            statistics.median(values),
            statistics.median(value / ping for value, ping in zip(values, rates["ping"], strict=True)),
        )
        for name, values in rates.items()
    }


def bench_batch_enqueue(broker: RedisBroker, n: int, queue: str = "bench") -> float:
    tasks = [task(i, queue) for i in range(n)]
    start = time.perf_counter()
    for offset in range(0, n, 10_000):
        broker.enqueue(tasks[offset : offset + 10_000], time.time())
    return rate(n, time.perf_counter() - start)


def bench_drain(broker: RedisBroker, n: int, batch: int, queue: str = "bench") -> float:
    """Claim + settle ``n`` tasks of ``queue`` in batches: tasks/s (all ``n`` are drained, or it fails)."""
    done = 0
    start = time.perf_counter()
    while done < n:
        claimed = broker.claim([queue], time.time(), 60.0, limit=batch)
        if not claimed:
            break
        applied = broker.settle(
            [Outcome(r.id, r.lease_token or "", "complete", result="null") for r in claimed], time.time()
        )
        assert all(applied)
        done += len(claimed)
    elapsed = time.perf_counter() - start
    assert done == n, f"drained {done} of {n}"
    return rate(n, elapsed)


def bench_runtime_drain(url: str, n: int, concurrency: int) -> float:
    """Drain ``n`` no-op tasks through ``Worker.run()`` (fetcher, pool, acker threads), one process."""
    app = Conveyor(url)

    @app.task(queue="rt")
    def noop(i: int) -> None:
        return None

    for offset in range(0, n, 10_000):
        app.enqueue_many("noop", [((i,), {}) for i in range(offset, min(n, offset + 10_000))], queue="rt")
    worker = Worker(app, WorkerConfig(queues=("rt",), concurrency=concurrency, prefetch=concurrency))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    start = time.perf_counter()
    thread.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runtime = worker.runtime
        if runtime is not None and runtime.acker.processed >= n:
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    worker.stop()
    thread.join()
    processed = worker.runtime.acker.processed if worker.runtime is not None else 0
    app.broker.close()
    assert processed == n, f"drained {processed} of {n}"
    return rate(n, elapsed)


def paced(count: int, per_second: float) -> Iterator[int]:
    """0 .. count - 1, each yielded at its time on a steady ``per_second`` schedule (sleeping between)."""
    interval = 1.0 / per_second
    next_at = time.perf_counter()
    for i in range(count):
        while time.perf_counter() < next_at:
            time.sleep(max(0.0, next_at - time.perf_counter() - 0.0005))
        yield i
        next_at += interval


def bench_latency(broker: RedisBroker, url: str, count: int, per_second: float) -> list[float]:
    """Producer enqueues at a steady rate; an idle worker waits in ``claim_after_wait`` on the server
    clock (the runtime's default), so the claim is queued behind its blocking pop."""
    latencies: list[float] = []
    sent: dict[str, float] = {}
    stop = threading.Event()
    worker = RedisBroker.from_url(url, BrokerPolicy())
    clock = worker.server_clock()

    def consume() -> None:
        while not stop.is_set():
            claimed = worker.claim_after_wait(["lat"], clock, 60.0, 10, 0.5)
            if not claimed:
                continue
            now = time.perf_counter()
            latencies.extend(now - sent[r.id] for r in claimed)
            worker.settle([Outcome(r.id, r.lease_token or "", "complete") for r in claimed], time.time())

    thread = threading.Thread(target=consume)
    thread.start()
    for i in paced(count, per_second):
        sent[f"lat-{i}"] = time.perf_counter()
        broker.enqueue([task(i, "lat")], time.time())
    deadline = time.monotonic() + 10
    while len(latencies) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join()
    worker.close()
    return latencies


def bench_idle_ping(broker: RedisBroker, count: int, per_second: float) -> list[float]:
    """PING round trips (s) sent at the latency benchmark's steady rate: the round trip between idle
    processes, which on a virtual machine costs several times a busy loop's (each hop wakes an idle
    core). Idle-to-running is one hop to the server and one to the worker, so this is its floor."""
    client = broker.client
    times: list[float] = []
    for _ in paced(count, per_second):
        start = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - start)
    return times


def server_times(broker: RedisBroker, n: int, batch: int) -> dict[str, float]:
    """Server µs per task for one-task enqueues, 10,000-task batch enqueues and batch claim + settle."""
    counter = iter(range(10**9))

    def singles() -> int:
        for _ in range(n // 4):
            broker.enqueue([task(next(counter), "srv")], time.time())
        return n // 4

    def batches() -> int:
        bench_batch_enqueue(broker, n, "srv-batch")
        return n

    def drain() -> int:
        bench_drain(broker, n, batch, "srv-batch")
        return n

    return {
        "enqueue, one task per call": server_time(broker, singles),
        "enqueue, batches of 10,000": server_time(broker, batches),
        f"claim + settle, batches of {batch}": server_time(broker, drain),
    }


def memory_per_task(broker: RedisBroker, n: int) -> float:
    client = broker.client
    before = int(client.info("memory")["used_memory"])
    broker.enqueue([NewTask(id=f"m{i}", name="noop", queue="mem", payload="[[1], {}]") for i in range(n)], time.time())
    after = int(client.info("memory")["used_memory"])
    return (after - before) / n


def one_run(server: RedisServer, args: argparse.Namespace, namespace: str) -> dict[str, float]:
    """Every figure once, in a namespace of its own (ids never collide with an earlier run's)."""
    url = server.namespace_url(namespace)
    broker = RedisBroker.from_url(url, BrokerPolicy())
    try:
        broker.enqueue([task(-1, "warm")], time.time())
        single = bench_single(broker, url, args.single)
        batch = bench_batch_enqueue(broker, args.tasks)
        drain = bench_drain(broker, args.tasks, args.batch)
        runtime_drain = bench_runtime_drain(url, args.tasks, args.concurrency)
        lat = [x * 1000 for x in bench_latency(broker, url, args.latency_tasks, 200.0)]
        idle = [x * 1000 for x in bench_idle_ping(broker, args.latency_tasks, 200.0)]
        per_task = server_times(broker, min(args.tasks, 20_000), args.batch)
        mem = memory_per_task(broker, 20_000)
    finally:
        broker.close()
    p50, idle50 = percentile(lat, 50), percentile(idle, 50)
    figures = {
        "ping": single["ping"][0],
        "single": single["enqueue"][0],
        "single_ratio": single["enqueue"][1],
        "app": single["app"][0],
        "app_ratio": single["app"][1],
        "batch": batch,
        "drain": drain,
        "runtime_drain": runtime_drain,
        "runtime_share": runtime_drain / drain,
        "p50": p50,
        "p99": percentile(lat, 99),
        "idle50": idle50,
        "idle99": percentile(idle, 99),
        "p50_to_idle": p50 / idle50,
        "memory": mem,
    }
    figures.update({f"server: {what}": usec for what, usec in per_task.items()})
    return figures


def markdown_header(args: argparse.Namespace, started: float, revision: str, version: str, placement: str) -> list[str]:
    """The Markdown report's title and how the run was made."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    return [
        "# The Redis broker against its aims (issue 4)",
        "",
        f"Written by `python -m bench.bench_redis {shlex.join(sys.argv[1:])}`;",
        "do not edit by hand. Every figure was measured in each run (runs one after another, each in a",
        "namespace of its own): its median, its range and in how many runs it met its aim. This shared",
        "machine's speed moves by up to 2x between runs minutes apart, so one run cannot judge an aim.",
        "How each figure is measured: the docstrings of `bench/bench_redis.py`.",
        "",
        f"**Run:** {when}, commit {revision}, {args.reps} run(s) of {args.tasks:,} tasks, "
        f"{time.time() - started:.0f} s.  ",
        f"**Machine:** {os.cpu_count()} cores, {cpu_model()}.  ",
        f"**Server:** {version}, no persistence; {placement}.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500, help="claim batch size")
    parser.add_argument("--concurrency", type=int, default=200, help="worker concurrency for the runtime drain")
    parser.add_argument("--latency-tasks", type=int, default=1000, help="tasks sent at 200/s for the latency")
    parser.add_argument("--reps", type=int, default=1, help="runs of every figure, one after another")
    parser.add_argument("--server", default=None, help="valkey (default) or redis-server")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the report there (docs/redis-aims.md)")
    args = parser.parse_args()
    placement = choose_placement()
    started, revision = time.time(), git_revision(Path(__file__).resolve().parents[1])
    with RedisServer(binary=find_server_binary(args.server)) as server:
        if placement.server_core is not None and server.pid is not None:
            os.sched_setaffinity(server.pid, {placement.server_core})
        placement.pin_clients()
        print(f"server: {server.binary} on port {server.port}; {placement.describe()}")
        version = server_version(server.client())
        runs = []
        for rep in range(args.reps):
            runs.append(one_run(server, args, f"bench{rep}"))
            if args.reps > 1:
                print(f"run {rep + 1} of {args.reps} done", flush=True)
    r = Report(runs)
    if args.markdown is not None:
        header = markdown_header(args, started, revision, version, placement.describe())
        r.write_markdown(args.markdown, header, {"batch": args.batch, "concurrency": args.concurrency})
    print(f"raw PING round trips   {r.value('ping'):10,.0f} /s{r.spread('ping', ',.0f')}")
    print(
        f"single enqueue         {r.value('single'):10,.0f} /s   ({r.value('single_ratio'):.2f}x raw round trips; "
        f"aim {r.aim('single_ratio').text}{r.spread('single_ratio', '.2f', r.aim('single_ratio'))})"
    )
    print(
        f"app.enqueue (by name)  {r.value('app'):10,.0f} /s   ({r.value('app_ratio'):.2f}x raw round trips"
        f"{r.spread('app_ratio', '.2f')})"
    )
    batch_aim = r.spread("batch", ",.0f", r.aim("batch"))
    print(f"batch enqueue          {r.value('batch'):10,.0f} /s   (aim {r.aim('batch').text}{batch_aim})")
    print(
        f"drain, one process     {r.value('drain'):10,.0f} /s   (claim batch {args.batch}; aim {r.aim('drain').text}"
        f"{r.spread('drain', ',.0f', r.aim('drain'))})"
    )
    print(
        f"drain, Worker.run()    {r.value('runtime_drain'):10,.0f} /s   (no-op tasks, concurrency {args.concurrency}, "
        f"one process{r.spread('runtime_drain', ',.0f', r.aim('runtime_drain'))}; "
        f"{r.value('runtime_share'):.2f}x the one-process drain of the same run{r.spread('runtime_share', '.2f')})"
    )
    latency_aims = r.spread("p50", ".3f", r.aim("p50"), "p50") + r.spread("p99", ".3f", r.aim("p99"), "p99")
    print(
        f"idle-to-running        p50 {r.value('p50'):.3f} ms, p99 {r.value('p99'):.3f} ms at 200 tasks/s "
        f"(aim {r.aim('p50').text} / {r.aim('p99').text}{latency_aims})"
    )
    print(
        f"idle PING round trip   p50 {r.value('idle50'):.3f} ms, p99 {r.value('idle99'):.3f} ms at 200/s (its floor; "
        f"idle-to-running p50 = {r.value('p50_to_idle'):.2f}x{r.spread('p50_to_idle', '.2f')})"
    )
    print(f"memory per queued task {r.value('memory'):10,.0f} bytes (payload 9 bytes{r.spread('memory', ',.0f')})")
    for key in r.server_times():
        print(f"server time per task   {r.value(key):10,.1f} us   ({key[8:]}{r.spread(key, '.1f')})")


if __name__ == "__main__":
    main()
