"""Just the SQLite latency row of ``make bench``: ``python -m bench.sqlite_latency [--passes N] [--code DIR]``.

Runs the latency workload of the suite exactly as a ``make bench`` pass does for ``Conveyor (sqlite)``
[default]: ``conveyor worker bench.conveyor_peer:app`` on a fresh file in the run's SQLite directory
(the disk, not a tmpfs), idle and warmed up, then a producer process enqueueing ``--n`` tasks one at
a time at a paced 200/s, each carrying ``time.time()``; latency is the handler's start minus that
stamp, so it spans the producer's commit, the wake-up, the claim's commit and the hand-off to a
slot. Every process is pinned to the harness's client core, as in ``make bench``. No Redis server is
started (nothing of it is used).

``--code DIR`` (repeatable) runs the same passes on other source trees (a ``src`` directory, e.g. a
``git worktree`` of an older commit), one after the other within each pass, so before and after are
compared in one run on the same disk at the same moment. Each pass first times ``--n`` bare one-row
WAL commits at ``synchronous=FULL``, paced at 200/s on the same disk: the producer's own commit is
part of every latency, so that is its floor of the moment. Prints p50/p99 (ms) per pass and code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from bench.measure import percentile
from bench.peer_runs import HERE, ROOT, Peer, PeerRunner
from bench.server import choose_placement

if TYPE_CHECKING:
    from bench.server import Server

__all__ = ["main", "measure"]


class _NoServer:
    """What ``PeerRunner`` asks of the Redis server, for a peer that stores in a file: nothing."""

    url = "redis://127.0.0.1:1/0"  # never used: the peer's BENCH_URL names the SQLite file

    def flush(self) -> None:
        return None


def measure(directory: Path, n: int, src: Path | None, log_dir: Path) -> tuple[float, float]:
    """One latency run on a fresh file in ``directory``; ``src``: the Conveyor source tree the worker and
    the producer import (None: this one). Returns (p50, p99) in ms."""
    url = f"sqlite:///{directory / 'bench.db'}"
    env = [("BENCH_URL", url)]
    if src is not None:
        env.append(("PYTHONPATH", os.pathsep.join([str(src), str(ROOT), str(HERE / "peers")])))
    peer = Peer("Conveyor (sqlite)", "conveyor", tuple(env))
    runner = PeerRunner(Path(sys.executable), cast("Server", _NoServer()), peer, "default", log_dir)
    for suffix in ("", "-wal", "-shm", "-wake", "-turn"):
        Path(f"{directory / 'bench.db'}{suffix}").unlink(missing_ok=True)
    return runner.latency(n, 120)


def commit_floor(directory: Path, n: int, rate: float = 200.0) -> tuple[float, float]:
    """p50 and p99 (ms) of ``n`` bare one-row WAL commits at ``synchronous=FULL``, paced at ``rate``/s."""
    path = directory / "floor.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        took = []
        next_at = time.perf_counter()
        for i in range(n):
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.perf_counter()))
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (str(i),))
            conn.execute("COMMIT")
            took.append((time.perf_counter() - start) * 1000)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return percentile(took, 50), percentile(took, 99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--n", type=int, default=600, help="tasks per run (make bench: 600)")
    parser.add_argument("--code", type=Path, action="append", default=[], help="another src tree to compare")
    args = parser.parse_args()
    choose_placement().pin_clients()
    codes: list[tuple[str, Path | None]] = [("this tree", None)] + [(str(p), p.resolve()) for p in args.code]
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="conveyor-bench-sqlite-latency-"))
    try:
        for number in range(1, args.passes + 1):
            p50, p99 = commit_floor(work, args.n)
            print(f"pass {number}: bare FULL commit at 200/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
            for label, src in codes:
                p50, p99 = measure(work, args.n, src, log_dir)
                print(f"pass {number}: {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
