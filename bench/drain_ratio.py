"""``python -m bench.drain_ratio``: the one-process drain of Conveyor against peers, in one run.

A quick check of the headline ratio (issue 32: the default ``conveyor worker`` drains at least 2.7x
the best peer's rate in the same run and placement) without the hours of a full ``make bench``:
only the drain workload, the server and the clients placed as ``make bench`` places them, each
repetition one pass over every library (so a slow phase of the shared machine weighs on all alike).
Besides the rate it prints the worker's CPU per task (``/proc`` utime + stime of the worker's
process tree, read at its first task and at its last). Each pass prints every row and Conveyor's
ratio to the best peer of that pass; the end, each row's median and range and the ratios' range.
Each backend's Conveyor rows are compared with that backend's peers: Redis with Dramatiq and Huey on
Redis, SQLite with Huey's ``SqliteHuey`` (consumer with 1 and with 8 threads; issue 42: at least 3x the
best of them); when both run, Conveyor SQLite's default row is also given as a ratio to Conveyor Redis's
default row of the same pass (issue 42: at least 0.8x).

    python -m bench.drain_ratio [--n 20000] [--reps 3] [--peers dramatiq,huey,huey_sqlite] [--conveyor default,tuned]
        [--backends redis,sqlite] [--env "NAME=VALUE;NAME=VALUE" ...]

``--backends redis4`` adds Conveyor's Redis rows with layout 4's keys (the namespace in one slot,
``Keys``, what the version before stored) on the same server: ``--backends redis,redis4`` compares the
layout that runs (layout 5, a slot per queue) with it in one run.

Each ``--env`` adds a row: the default ``conveyor worker`` with those ``CONVEYOR_WORKER_*`` settings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.peer_runs import PEERS, Peer, PeerRunner, sqlite_peers
from bench.procs import stop_group, tree_cpu, wait_for_file
from bench.server import Server, choose_placement, cpu_model
from bench.suite import new_sqlite_dir

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent

#: Peer settings issue 32 measured with, beside the peers' default and tuned ones.
ISSUE_PEERS = {
    "dramatiq": [("8 threads, prefetch 100", {"BENCH_PREFETCH": "100"})],
    "huey": [("8 threads", {"BENCH_THREADS": "8"})],
}


@dataclass
class Row:
    label: str
    runner: PeerRunner
    extra_env: dict[str, str] = field(default_factory=dict)
    rates: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    conveyor: bool = False
    backend: str = "redis"


def drain(row: Row, n: int) -> tuple[float, float]:
    """Fill ``n`` no-op tasks, start the worker; (tasks/s from first to last execution, CPU µs per task)."""
    runner = row.runner
    runner.reset()
    runner.produce("drain", n, "bulk" if runner.info.get("bulk") else "single")
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "BENCH_DONE_FILE": str(Path(tmp) / "done.json"),
            "BENCH_READY_FILE": str(Path(tmp) / "ready.json"),
            "BENCH_EXPECT_OK": str(n),
        }
        if row.extra_env and row.conveyor:
            files["BENCH_CONVEYOR_ENV"] = ";".join(f"{k}={v}" for k, v in row.extra_env.items())
        elif row.extra_env:
            files.update(row.extra_env)
        proc = runner.start_worker("drain", files)
        try:
            wait_for_file(Path(files["BENCH_READY_FILE"]), 120, proc)
            cpu_start = tree_cpu(proc.pid)
            result = wait_for_file(Path(files["BENCH_DONE_FILE"]), 600, proc)
            cpu_end = tree_cpu(proc.pid)
        finally:
            stop_group(proc)
    return n / (float(result["last"]) - float(result["first"])), (cpu_end - cpu_start) / n * 1e6


def pass_ratios(rows: list[Row]) -> list[tuple[str, str, float]]:
    """This pass's ratios as (row, what it is compared with, ratio): each Conveyor row to the best peer
    of its backend, then Conveyor SQLite's default row to Conveyor Redis's when both ran."""
    found: list[tuple[str, str, float]] = []
    for row in rows:
        best = max((r.rates[-1] for r in rows if not r.conveyor and r.backend == row.backend), default=0.0)
        if row.conveyor and best:
            against = "the best SQLite peer" if row.backend == "sqlite" else "the best peer"
            found.append((row.label, against, row.rates[-1] / best))
    defaults = {r.backend: r.rates[-1] for r in rows if r.conveyor and r.label.endswith(") default")}
    if defaults.get("redis") and defaults.get("sqlite"):
        found.append(("Conveyor (sqlite) default", "Conveyor (redis) default", defaults["sqlite"] / defaults["redis"]))
    return found


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_ratio", description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peers", default="dramatiq,huey,huey_sqlite")
    parser.add_argument("--peer-variants", default="default,tuned")
    parser.add_argument("--conveyor", default="default,tuned")
    parser.add_argument("--backends", default="redis")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE;NAME=VALUE")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    placement = choose_placement()
    placement.pin_clients()
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    wanted = [name for name in args.peers.split(",") if name]
    backends = [b for b in args.backends.split(",") if b]
    sqlite_dir = new_sqlite_dir("conveyor-drain-ratio-")
    # each backend's peers: the Redis ones when Redis runs, SqliteHuey when SQLite runs
    peers = [(p, "redis") for p in PEERS if p.module in wanted and "redis" in backends]
    peers += [(p, "sqlite") for p in sqlite_peers(sqlite_dir) if p.module in wanted and "sqlite" in backends]
    python = None
    if peers:
        from bench.peers_venv import ensure_peers_venv

        python = ensure_peers_venv()
    extra = [(text, dict(item.split("=", 1) for item in text.split(";"))) for text in args.env]
    print(f"{cpu_model()}; {placement.describe()}; n={args.n}", flush=True)
    with Server(placement) as server:
        rows: list[Row] = []
        for backend in backends:
            url = server.url if backend.startswith("redis") else f"sqlite:///{sqlite_dir / 'bench.db'}"
            layout = (("BENCH_REDIS_LAYOUT", "4"),) if backend == "redis4" else ()  # read by conveyor_peer.py
            peer = Peer(f"Conveyor ({backend})", "conveyor", (("BENCH_URL", url), *layout))
            trials: list[tuple[str, str, dict[str, str]]] = [(v, v, {}) for v in args.conveyor.split(",") if v]
            trials += [("default", text, settings) for text, settings in extra]
            for variant, label, settings in trials:
                runner = PeerRunner(Path(sys.executable), server, peer, variant, log_dir)
                runner.info = {"bulk": True}
                rows.append(Row(f"{peer.label} {label}", runner, settings, conveyor=True, backend=backend))
        for peer, backend in peers:
            assert python is not None
            for variant in [v for v in args.peer_variants.split(",") if v in peer.variants]:
                runner = PeerRunner(python, server, peer, variant, log_dir)
                runner.load_info()
                rows.append(Row(f"{peer.label} {variant}", runner, backend=backend))
            for label, trial in ISSUE_PEERS.get(peer.module, []):  # issue 32's settings
                runner = PeerRunner(python, server, peer, "default", log_dir)
                runner.load_info()
                rows.append(Row(f"{peer.label} {label}", runner, trial, backend=backend))
        ratios: dict[tuple[str, str], list[float]] = {}
        for number in range(args.reps):
            print(f"pass {number + 1} of {args.reps}", flush=True)
            for row in rows:
                n = args.n if row.conveyor else max(100, int(args.n * row.runner.peer.scale))
                rate, cpu = drain(row, n)
                row.rates.append(rate)
                row.cpu_us.append(cpu)
                print(f"  {row.label:40s} {rate:9.0f}/s {cpu:6.1f} µs/task", flush=True)
            for label, against, ratio in pass_ratios(rows):
                ratios.setdefault((label, against), []).append(ratio)
                print(f"  {label}: {ratio:.2f}x {against} of this pass", flush=True)
            time.sleep(0.1)
    print("medians (range):")
    for row in rows:
        print(
            f"  {row.label:40s} {statistics.median(row.rates):9.0f}/s ({min(row.rates):.0f}-{max(row.rates):.0f})"
            f"  {statistics.median(row.cpu_us):6.1f} µs/task ({min(row.cpu_us):.1f}-{max(row.cpu_us):.1f})"
        )
    for (label, against), values in ratios.items():
        print(f"  {label}: {', '.join(f'{v:.2f}x' for v in values)} {against}, pass by pass")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
