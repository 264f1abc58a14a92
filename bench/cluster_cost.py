"""The Redis broker on one server against a private 3-master cluster: what each costs per task.

    .venv/bin/python -m bench.cluster_cost [--tasks 20000] [--singles 2000] [--reps 3] [--partitions 6]
                                           [--one-master] [--namespace-length 8] [--backlog N]
                                           [--batch 500] [--background] [--compare-ids]

Per run and target (``redis://`` on one server, ``redis+cluster://`` on three masters, built with
``conveyor.testing``, on layout 4's keys, the namespace in one slot; with ``--partitions N``, also both
on layout 5's, a slot per queue, and the queue in N partitions, ids made as an app makes them,
``<hex>~<partition>``): one-task enqueues (``singles`` calls), batch enqueues (``--batch``, 500 a
call) and a drain (claim 500, settle them), each timed on the client (wall and CPU of this process) and
on the servers (``used_cpu_user + used_cpu_sys`` deltas of every master, from ``INFO cpu``; and the part
of it spent running the scripts, ``usec`` of ``cmdstat_fcall``, steadier on a busy machine), with the
share of the commands each master ran (``INFO commandstats`` deltas); and first, as the floor, a
PING per call (in rotation over the masters where the queue is partitioned), and the user part of the
server CPU beside the total (the rest is ``used_cpu_sys``, the kernel's share), and per 1,000 tasks
the servers' reads from and writes to client sockets (``INFO stats``) and their processes' context
switches (``/proc``, voluntary and not): the network exchanges and wake-ups behind the figures. On
this 2-core machine wall-clock scaling cannot show, so server CPU per task and its spread over
masters are the figures that decide it: a master's capacity is 1 / its CPU per task. Each run uses a
namespace of its own, ``t`` and hex digits, 8 characters in all unless ``--namespace-length`` says
otherwise (a cluster-enabled server hashes each key's tag, which holds
the namespace, once per command: its length weighs on the cluster's figures alone); targets
alternate.

``--backlog N`` enqueues N tasks one by one, untimed, before the timed one-task enqueues, so these
meet a queue of N tasks and more: a sorted set of up to 128 members is a listpack, whose insert
reads every member (``zset-max-listpack-entries``), so without a backlog the one-task enqueues into
N partitions meet lists N times shorter than the whole queue's, that stay listpacks N times longer.

``--one-master`` (with ``--partitions``) adds ``cluster1/pN``: layout 5 on a cluster of one master,
which serves every slot. It tells the two parts of the gap apart: cluster mode itself (the same
commands, each costing a cluster-enabled server more: ``cluster1/pN`` against ``server/pN``) and the
work spread over three processes (``cluster/pN`` against ``cluster1/pN``).

``--background`` adds, after each phase, the servers' CPU over an idle span as long as the phase took,
per task of the phase (``idle``): what the servers spend while nobody calls them (their timers; on a
cluster, the cluster bus's pings), part of any phase's figure and more of a short one's.
``--batch N`` makes the batch phase's calls N tasks each: where N is a multiple of the partitions,
each partition's call holds N / partitions of them (a queue in 6 partitions and ``--batch 3000``:
500 a call, as the whole queue's calls). The batch phase labels each batch's ids as an app's
``enqueue_many`` does (``batch_id_suffixes``: a batch of up to 500 tasks to one partition, the next
one in rotation); ``--compare-ids`` (with ``--partitions``) adds ``server/pN/t`` and ``cluster/pN/t``,
whose batches are labelled one partition per task in rotation instead (before that rule: each batch
spread over every partition), alternating with the others on the same servers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys, Keys5
from conveyor.model import BrokerPolicy, NewTask, Outcome, QueueSettings
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

NOW = 1_000_000.0


def _cpu(server: RedisServer) -> tuple[float, float]:
    """The server's CPU seconds so far: (user + system, user)."""
    info = server.client().info("cpu")
    user = float(info["used_cpu_user"])
    return user + float(info["used_cpu_sys"]), user


def _calls(server: RedisServer) -> tuple[int, float, int, int]:
    """Commands the server ran (those a script calls included), the microseconds it spent in
    ``FCALL``s (``INFO commandstats``; a script's commands are counted again on their own, so only
    the scripts' time adds up), and the reads from and writes to its clients' sockets it made so far
    (``INFO stats``: a request larger than the server's read buffer takes more than one read)."""
    client = server.client()
    info, stats = client.info("commandstats"), client.info("stats")
    scripts = float(info.get("cmdstat_fcall", {}).get("usec", 0))
    calls = sum(int(entry["calls"]) for entry in info.values())
    return calls, scripts, int(stats.get("total_reads_processed", 0)), int(stats.get("total_writes_processed", 0))


def _task(suffix: Callable[[str], str] | None = None) -> NewTask:
    task_id = uuid.uuid4().hex + (suffix("q") if suffix else "")
    return NewTask(id=task_id, name="job", queue="q", payload='[[1], {"x": "0123456789abcdef"}]')


def _switches(server: RedisServer) -> int:
    """The server process's context switches so far, voluntary and not (``/proc``; 0 where unreadable)."""
    try:
        with open(f"/proc/{server.pid}/status") as status:
            return sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)
    except OSError:
        return 0


def _pin(servers: Sequence[RedisServer]) -> None:
    """``--pin``: the servers on the first core, this process on the last, so the client's work never
    shares a core (and its caches) with a server's; three masters then share one core, as one server
    has one, and what they cost beyond it is their switching and their caches' sharing."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--pin needs two cores")
    for server in servers:
        assert server.pid is not None  # started
        os.sched_setaffinity(server.pid, {cores[0]})
    os.sched_setaffinity(0, {cores[-1]})
    print(f"pinned: {len(servers)} servers on core {cores[0]}, this client on core {cores[-1]}")


def _phase(
    servers: Sequence[RedisServer], count: int, work: Callable[[], object], background: bool = False
) -> dict[str, object]:
    cpu0, calls0, switches0 = [_cpu(s) for s in servers], [_calls(s) for s in servers], sum(map(_switches, servers))
    wall0, client0 = time.perf_counter(), time.process_time()
    work()
    wall, client = time.perf_counter() - wall0, time.process_time() - client0
    cpus = [_cpu(s) for s in servers]
    cpu = [c[0] - c0[0] for c, c0 in zip(cpus, cpu0, strict=True)]
    user = [c[1] - c0[1] for c, c0 in zip(cpus, cpu0, strict=True)]
    stats = [_calls(s) for s in servers]
    switches = sum(map(_switches, servers)) - switches0
    calls = [c[0] - c0[0] for c, c0 in zip(stats, calls0, strict=True)]
    usec = sum(c[1] - c0[1] for c, c0 in zip(stats, calls0, strict=True))
    total = sum(calls) or 1
    idle = 0.0
    if background:  # what the servers spend while nobody calls them, over as long as the phase took
        time.sleep(wall)
        idle = sum(_cpu(s)[0] for s in servers) - sum(c[0] for c in cpus)
    return {
        "rate": count / wall,
        "client_us": client / count * 1e6,
        "server_us": sum(cpu) / count * 1e6,
        "user_us": sum(user) / count * 1e6,
        "command_us": usec / count,
        "idle_us": idle / count * 1e6,
        "reads": sum(c[2] - c0[2] for c, c0 in zip(stats, calls0, strict=True)) / count * 1000,
        "writes": sum(c[3] - c0[3] for c, c0 in zip(stats, calls0, strict=True)) / count * 1000,
        "switches": switches / count * 1000,
        "share": [round(c / total, 2) for c in calls],
    }


def _pings(servers: Sequence[RedisServer], count: int, rotate: bool, background: bool) -> dict[str, object]:
    """The floor, nothing of Conveyor's in it: ``count`` PINGs one at a time, in rotation over the
    masters when ``rotate`` (as a partitioned queue's one-task enqueues go), else all to the first."""
    clients = [server.client() for server in (servers if rotate else servers[:1])]
    try:
        return _phase(servers, count, lambda: [clients[i % len(clients)].ping() for i in range(count)], background)
    finally:
        for client in clients:
            client.close()


def _namespace(length: int) -> str:
    """A fresh namespace of ``length`` characters (2 to 33)."""
    return "t" + uuid.uuid4().hex[: length - 1]


def run(
    url: str,
    servers: Sequence[RedisServer],
    tasks: int,
    singles: int,
    partitions: int = 0,
    backlog: int = 0,
    *,
    batch: int = 500,
    background: bool = False,
    per_task_ids: bool = False,
) -> dict[str, dict[str, object]]:
    config = RedisConfig.from_url(url)
    keys = Keys5(config.namespace) if partitions else Keys(config.namespace)
    broker = RedisBroker(config, BrokerPolicy(), keys)
    try:
        if partitions:
            broker.configure_queue(QueueSettings("q", partitions=partitions))
        suffix = broker.id_suffixes()
        broker.enqueue([_task(suffix)], NOW)  # first use: client chosen, library loaded
        for _ in range(backlog):  # one by one, as the phase below: each sorted set grows as it will
            broker.enqueue([_task(suffix)], NOW)
        out = {"ping": _pings(servers, singles, bool(partitions), background)}
        out["enqueue 1"] = _phase(
            servers, singles, lambda: [broker.enqueue([_task(suffix)], NOW) for _ in range(singles)], background
        )

        def batches() -> None:
            for _ in range(tasks // batch):
                labels = suffix if per_task_ids else broker.batch_id_suffixes(batch)
                broker.enqueue([_task(labels) for _ in range(batch)], NOW)

        out[f"enqueue {batch}"] = _phase(servers, tasks // batch * batch, batches, background)

        def drain() -> None:
            while claimed := broker.claim(["q"], NOW, 60.0, limit=500):
                broker.settle([Outcome(r.id, r.lease_token or "", "complete") for r in claimed], NOW)

        out["drain"] = _phase(servers, tasks // batch * batch + singles + backlog + 1, drain, background)
        return out
    finally:
        broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--singles", type=int, default=2_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=0, help="also run split slots, the queue in N partitions")
    parser.add_argument("--one-master", action="store_true", help="also a one-master cluster (with --partitions)")
    parser.add_argument("--backlog", type=int, default=0, help="one-task enqueues before the timed ones")
    parser.add_argument("--namespace-length", type=int, default=8, help="characters of each run's namespace (2..33)")
    parser.add_argument("--batch", type=int, default=500, help="tasks per call of the batch enqueue phase")
    parser.add_argument("--compare-ids", action="store_true", help="also batches labelled per task (with --partitions)")
    parser.add_argument(
        "--background", action="store_true", help="also the servers' CPU while idle, as long as each phase took"
    )
    parser.add_argument(
        "--pin", action="store_true", help="every server on the first core, this client on the last (Linux)"
    )
    args = parser.parse_args()
    if not 2 <= args.namespace_length <= 33:
        parser.error("--namespace-length must be 2..33 (`t` and up to 32 hex digits)")
    results: dict[str, dict[str, list[dict[str, object]]]] = {}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(RedisServer())
        cluster = stack.enter_context(LocalCluster(masters=3))
        one = stack.enter_context(LocalCluster(masters=1)) if args.one_master and args.partitions else None
        if args.pin:
            _pin([server, *cluster.masters, *(one.masters if one else [])])
        n = args.namespace_length
        for _ in range(args.reps):
            targets: list[tuple[str, str, Sequence[RedisServer], int]] = [
                ("server", server.namespace_url(_namespace(n)), [server], 0),
                ("cluster", cluster.namespace_url(_namespace(n)), list(cluster.masters), 0),
            ]
            # with --compare-ids, the same partitioned targets labelling a batch per task first ("/t")
            kinds = ((["/t"] if args.compare_ids else []) + [""]) if args.partitions else []
            for kind in kinds:
                p = args.partitions
                targets += [
                    (f"server/p{p}{kind}", server.namespace_url(_namespace(n)), [server], p),
                    (f"cluster/p{p}{kind}", cluster.namespace_url(_namespace(n)), list(cluster.masters), p),
                ]
            if one is not None:
                targets.append(
                    (
                        f"cluster1/p{args.partitions}",
                        one.namespace_url(_namespace(n)),
                        list(one.masters),
                        args.partitions,
                    )
                )
            for name, url, servers, partitions in targets:
                figures_by_phase = run(
                    url,
                    servers,
                    args.tasks,
                    args.singles,
                    partitions,
                    args.backlog,
                    batch=args.batch,
                    background=args.background,
                    per_task_ids=name.endswith("/t"),
                )
                for phase, figures in figures_by_phase.items():
                    results.setdefault(name, {}).setdefault(phase, []).append(figures)
    for name, phases in results.items():
        for phase, runs in phases.items():
            rates = [float(str(r["rate"])) for r in runs]
            client = [float(str(r["client_us"])) for r in runs]
            srv = [float(str(r["server_us"])) for r in runs]
            user = [float(str(r["user_us"])) for r in runs]
            inside = [float(str(r["command_us"])) for r in runs]
            idle = [float(str(r["idle_us"])) for r in runs]
            per_k = {k: statistics.median(float(str(r[k])) for r in runs) for k in ("reads", "writes", "switches")}
            print(
                f"{name:12} {phase:12} {statistics.median(rates):9.0f}/s ({min(rates):.0f}-{max(rates):.0f})"
                f"  client CPU {statistics.median(client):6.1f} us/task  server CPU {statistics.median(srv):6.1f}"
                f" us/task (user {statistics.median(user):6.1f}, in scripts {statistics.median(inside):5.1f}"
                + (f", idle {statistics.median(idle):4.2f}" if args.background else "")
                + f")  per 1k tasks: reads {per_k['reads']:.0f}, writes {per_k['writes']:.0f},"
                f" switches {per_k['switches']:.0f}  command share per master {runs[-1]['share']}"
            )


if __name__ == "__main__":
    main()
