"""``python -m bench``: start the server, run every workload, write the report.

Options: ``--smoke`` (N=500, one repetition, the smallest sizes, Conveyor only unless ``--peers`` names
some), ``--no-peers``, ``--out DIR`` (where ``benchmarks.md`` and ``results.json`` go; default ``docs/``
for a full run, ``bench/results/smoke`` for smoke), ``--n`` (default ``$N`` or 20000), ``--reps``,
``--peers rq,huey,...``, ``--time-cap`` (s), ``--report-only results.json`` (rewrite the report from
saved figures). When Conveyor runs on SQLite, the peers include ``huey_sqlite`` (Huey's ``SqliteHuey``,
1 and 8 consumer threads, on a file), and each pass also measures the SQLite floor (bare commits and
one-task enqueues per ``synchronous`` mode) and ``--curve-shapes`` (default ``1,2,4``; ``''`` for none)
worker processes on one file (``bench/sqlite_runs.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.peer_runs import PEERS, sqlite_peers
from bench.report import write_report
from bench.server import Server, choose_placement, cpu_model
from bench.sqlite_report import sqlite_summary

if TYPE_CHECKING:
    from bench.suite import Suite

ROOT = Path(__file__).resolve().parent.parent


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--n", type=int, default=int(os.environ.get("N", "0") or 0))
    parser.add_argument("--reps", type=int)
    parser.add_argument("--peers", default="", help="comma-separated peer modules (default: all)")
    parser.add_argument("--time-cap", type=float, default=3600.0)
    parser.add_argument("--report-only", type=Path)
    parser.add_argument(
        "--peers-from",
        type=Path,
        action="append",
        default=[],
        help="merge the figures of an earlier results.json for what this run does not measure (repeatable); "
        "peers are then not re-run unless --peers names them",
    )
    parser.add_argument("--conveyor", default="memory,sqlite,redis", help="Conveyor backends to run ('' for none)")
    parser.add_argument("--curve-shapes", default="1,2,4", help="SQLite worker processes on one file ('' for none)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    out: Path = args.out or (ROOT / "bench" / "results" / "smoke" if args.smoke else ROOT / "docs")
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        data = json.loads(args.report_only.read_text())
        write_report(data, out / "benchmarks.md")
        return 0

    from bench.floors import measure_floors
    from bench.peers_venv import ensure_peers_venv, installed_versions
    from bench.suite import Plan, Suite, new_sqlite_dir

    n = args.n or (500 if args.smoke else 20_000)
    reps = args.reps or (1 if args.smoke else 3)
    wanted = {name for name in args.peers.split(",") if name}
    sqlite_dir = new_sqlite_dir()
    everyone = PEERS + (sqlite_peers(sqlite_dir) if "sqlite" in args.conveyor.split(",") else [])
    # a smoke run has no peers unless asked for by name (the tests check a peer's rows that way, small)
    skip_peers = args.no_peers or (args.smoke and not wanted)
    peers = [] if skip_peers else [p for p in everyone if not wanted or p.module in wanted]
    plan = Plan(n=n, reps=reps, latency_n=100 if args.smoke else 600, time_cap=args.time_cap, peers=peers)
    plan.rss_tasks = n if args.smoke else min(100_000, 5 * n)
    plan.floor_commits = 200 if args.smoke else min(2000, n)
    if args.smoke:
        plan.conveyor_variants = ("default",)
    plan.conveyor_backends = tuple(b for b in args.conveyor.split(",") if b)
    plan.curve_shapes = tuple(int(p) for p in args.curve_shapes.split(",") if p)
    if args.peers_from and not wanted:
        peers = plan.peers = []

    def say(message: str) -> None:
        print(message, flush=True)

    # SIGTERM unwinds like an exception, so the server and the workers are stopped by PID on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    placement = choose_placement()
    placement.pin_clients()
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    meta: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "placement": placement.describe(),
        "n": n,
        "reps": reps,
        "smoke": args.smoke,
        "command": " ".join(["python -m bench", *argv]),
        "peers_only": ", ".join(sorted({p.label for p in peers})) if wanted else "",
    }
    python = None
    if peers:
        say("peers venv: bench/.venv-peers")
        python = ensure_peers_venv()
        meta["versions"] = installed_versions(python)
    with Server(placement) as server:
        meta["server"] = f"{server.version} ({Path(server.binary).name}, no persistence)"
        say(f"server: {meta['server']} on {server.url}; {placement.describe()}")
        suite = Suite(server, plan, log_dir, say)
        say("floors")
        suite.figures += measure_floors(server, 300 if args.smoke else 10_000, reps)
        for number in range(reps):  # interleaved: see Suite.run_pass
            say(f"pass {number + 1} of {reps}")
            suite.run_pass(sqlite_dir, python)
    meta["duration_s"] = round(time.time() - started)
    results = ROOT / "bench" / "results" / ("smoke.json" if args.smoke else "results.json")
    if args.out:
        results = out / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    for earlier in reversed(args.peers_from):  # later files win
        _merge_peers(suite, meta, json.loads(earlier.read_text()))
    suite.dump(results, meta)
    data = json.loads(results.read_text())
    write_report(data, out / "benchmarks.md")
    for line in sqlite_summary(data):  # issue 42's figures, on the terminal too
        say(line)
    say(f"wrote {out / 'benchmarks.md'} and {results}")
    return 0


def _merge_peers(suite: Suite, meta: dict[str, object], earlier: dict[str, Any]) -> None:
    """Add an earlier run's figures (peers, or Conveyor rows) for every library/settings not measured now."""
    from bench.measure import Figure

    have = {(f.library, f.variant) for f in suite.figures if f.runs}
    taken = [f for f in earlier["figures"] if f["library"] != "server floor"]
    taken = [f for f in taken if (f["library"], f["variant"]) not in have and (f.get("runs") or f.get("note"))]
    replaced = {(f["library"], f["variant"]) for f in taken if f.get("runs")}
    suite.figures = [f for f in suite.figures if f.runs or (f.library, f.variant) not in replaced]
    suite.figures += [Figure.from_json(f) for f in taken]
    for library, variants in earlier.get("settings", {}).items():
        for variant, text in variants.items():
            suite.settings.setdefault(library, {}).setdefault(variant, text)
    meta["versions"] = meta.get("versions") or earlier["meta"].get("versions")
    floors = [f for f in earlier["figures"] if f["workload"] == "round_trip" and f.get("value")]
    merged = list(meta.get("merged_runs") or [])  # type: ignore[call-overload]
    merged.append({"date": earlier["meta"].get("date"), "round_trips": floors[0]["value"] if floors else None})
    meta["merged_runs"] = merged
    meta["peers_from"] = ", ".join(filter(None, [str(meta.get("peers_from") or ""), earlier["meta"].get("date")]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
