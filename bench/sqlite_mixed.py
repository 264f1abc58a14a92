"""Just the SQLite mixed row of ``make bench``: ``python -m bench.sqlite_mixed [--passes N] [--code DIR]``.

Runs the mixed workload as a ``make bench`` pass does for ``Conveyor (sqlite)`` [default]: ``conveyor
worker bench.conveyor_peer:app`` on a fresh file (the disk, not a tmpfs), warmed up, then a producer
process enqueueing ``--n`` tasks one at a time, 10% failing with 2 retries and no backoff, 10% delayed
0.5 s, priorities 0-9; the rate is tasks over the time from the first enqueue to the last execution.
Prints, per pass and code, the rate, how long the producer took and how long the last execution
came after it (the last delayed task falls due ~0.45 s after the last enqueue).

``--code DIR`` (repeatable) runs the same passes on other source trees (a ``src`` directory, e.g. a
``git worktree`` of an older commit), alternating their order from pass to pass.

``--trace`` also makes every transaction write its events (a listener row in the file, as a subscriber
has), then reads them: for the delayed tasks, their start minus their due time; for the retries,
their start minus the settle that scheduled them (ms, p50 / p90 / max). The events cost each
transaction a little: compare traced runs with traced runs.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from bench.measure import percentile
from bench.peer_runs import HERE, ROOT, Peer, PeerRunner
from bench.procs import stop_group, wait_for_file
from bench.server import Server, choose_placement
from bench.sqlite_latency import NoServer

__all__ = ["Mixed", "lateness", "main", "measure"]

DELAY = 0.5  # the delayed tasks' delay (``peers/_driver.py``: MIXED_DELAY)
EventRow = tuple[str, str | None, str, float]


@dataclass
class Mixed:
    """One run: tasks/s, the producer's time and the last execution's after it (s); traced, the
    delayed tasks' and the retries' lateness (ms, :func:`lateness`)."""

    rate: float
    produce: float
    tail: float
    delayed: list[float] = field(default_factory=list)
    retried: list[float] = field(default_factory=list)

    def line(self) -> str:
        text = f"{self.rate:,.0f}/s, producer {self.produce:.2f} s, last run {self.tail:+.2f} s"
        for name, values in (("delayed", self.delayed), ("retried", self.retried)):
            if values:
                text += f"; {name}: p50 {percentile(values, 50):.1f} / p90 {percentile(values, 90):.1f}"
                text += f" / max {max(values):.1f} ms"
        return text


def measure(directory: Path, n: int, src: Path | None, log_dir: Path, trace: bool) -> Mixed:
    """One mixed run on a fresh file in ``directory``; ``src``: the Conveyor source tree the worker and
    the producer import (None: this one)."""
    db = directory / "bench.db"
    env = [("BENCH_URL", f"sqlite:///{db}")]
    if src is not None:
        env.append(("PYTHONPATH", os.pathsep.join([str(src), str(ROOT), str(HERE / "peers")])))
    runner = PeerRunner(
        Path(sys.executable),
        cast("Server", NoServer()),
        Peer("Conveyor (sqlite)", "conveyor", tuple(env)),
        "default",
        log_dir,
    )
    for old in directory.glob("bench.db*"):
        old.unlink()
    failing = len(range(0, n, 10))
    with tempfile.TemporaryDirectory() as tmp:
        proc = runner._started_worker("mixed", Path(tmp), n - failing + 1, failing * 3)
        try:
            if trace:
                with sqlite3.connect(db, timeout=10) as conn:
                    conn.execute("INSERT OR REPLACE INTO listeners (origin, until) VALUES ('bench', 1e12)")
            start = time.time()
            runner.produce("mixed", n)
            produced = time.time()
            last = float(wait_for_file(Path(tmp) / "done.json", 300, proc)["last"])
        finally:
            stop_group(proc)
    result = Mixed(n / (last - start), produced - start, last - produced)
    if trace:
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT task_id, old_state, new_state, at FROM events ORDER BY id").fetchall()
        result.delayed, result.retried = lateness(rows)
    return result


def lateness(events: list[EventRow]) -> tuple[list[float], list[float]]:
    """From ``events`` (task id, old state, new state, time), in order: each delayed task's first start
    minus its due time, and each retry's start minus the settle that made it (ms)."""
    by_task: dict[str, list[tuple[str, float]]] = {}
    for task_id, _, new, at in events:
        by_task.setdefault(task_id, []).append((new, at))
    delayed: list[float] = []
    retried: list[float] = []
    for steps in by_task.values():
        if steps[0][0] == "scheduled":
            start = next((at for state, at in steps if state == "active"), None)
            if start is not None:
                delayed.append((start - steps[0][1] - DELAY) * 1000)
        for index, (state, at) in enumerate(steps):
            if state == "retry":
                start = next((t for s, t in steps[index + 1 :] if s == "active"), None)
                if start is not None:
                    retried.append((start - at) * 1000)
    return delayed, retried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--n", type=int, default=5000, help="tasks per run (make bench: N/4)")
    parser.add_argument("--code", type=Path, action="append", default=[], help="another src tree to compare")
    parser.add_argument("--trace", action="store_true", help="time each delayed task and retry from the events")
    args = parser.parse_args()
    choose_placement().pin_clients()
    codes: list[tuple[str, Path | None]] = [("this tree", None)] + [(str(p), p.resolve()) for p in args.code]
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-sqlite-mixed-") as work:
        for number in range(1, args.passes + 1):
            for label, src in codes if number % 2 else codes[::-1]:
                got = measure(Path(work), args.n, src, log_dir, args.trace)
                print(f"pass {number}: {label}: {got.line()}", flush=True)


if __name__ == "__main__":
    main()
