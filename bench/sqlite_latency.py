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

``--synchronous normal`` runs the file at ``synchronous=NORMAL`` instead of the default ``FULL`` (and
times the bare commits at it too): no commit then waits for the disk, so what is left is Conveyor's own
path (wake-up, claim, hand-off) rather than the disk's sync.

``--redis`` adds, in each pass, the same latency row for the default ``conveyor worker`` on a Redis
server the run starts (and stops): a control for what the shared machine's scheduling adds to a tail.
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
from typing import cast

from bench.measure import percentile
from bench.peer_runs import HERE, ROOT, Peer, PeerRunner
from bench.server import Server, choose_placement

__all__ = ["NoServer", "main", "measure"]


class NoServer:
    """What ``PeerRunner`` asks of the Redis server, for a peer that stores in a file: nothing."""

    url = "redis://127.0.0.1:1/0"  # never used: the peer's BENCH_URL names the SQLite file

    def flush(self) -> None:
        return None


def measure(directory: Path, n: int, src: Path | None, log_dir: Path, synchronous: str = "FULL") -> tuple[float, float]:
    """One latency run on a fresh file in ``directory``; ``src``: the Conveyor source tree the worker and
    the producer import (None: this one). Returns (p50, p99) in ms."""
    url = f"sqlite:///{directory / 'bench.db'}"
    if synchronous != "FULL":
        url += f"?synchronous={synchronous.lower()}"
    env = [("BENCH_URL", url)]
    if src is not None:
        env.append(("PYTHONPATH", os.pathsep.join([str(src), str(ROOT), str(HERE / "peers")])))
    peer = Peer("Conveyor (sqlite)", "conveyor", tuple(env))
    runner = PeerRunner(Path(sys.executable), cast("Server", NoServer()), peer, "default", log_dir)
    for suffix in ("", "-wal", "-shm", "-wake", "-turn"):
        Path(f"{directory / 'bench.db'}{suffix}").unlink(missing_ok=True)
    return runner.latency(n, 120)


def commit_floor(directory: Path, n: int, rate: float = 200.0, synchronous: str = "FULL") -> tuple[float, float]:
    """p50 and p99 (ms) of ``n`` bare one-row WAL commits at ``synchronous`` (FULL or NORMAL), paced at
    ``rate``/s."""
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
    path = directory / "floor.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
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
    parser.add_argument("--synchronous", type=str.upper, choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--redis", action="store_true", help="add the Redis default worker's row as a control")
    args = parser.parse_args()
    placement = choose_placement()
    placement.pin_clients()
    codes: list[tuple[str, Path | None]] = [("this tree", None)] + [(str(p), p.resolve()) for p in args.code]
    log_dir = ROOT / "bench" / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="conveyor-bench-sqlite-latency-"))
    server = Server(placement).start() if args.redis else None
    try:
        for number in range(1, args.passes + 1):
            p50, p99 = commit_floor(work, args.n, synchronous=args.synchronous)
            floor = f"bare {args.synchronous} commit at 200/s"
            print(f"pass {number}: {floor}: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
            for label, src in codes:
                p50, p99 = measure(work, args.n, src, log_dir, args.synchronous)
                print(f"pass {number}: {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
            if server is not None:
                peer = Peer("Conveyor (redis)", "conveyor")
                p50, p99 = PeerRunner(Path(sys.executable), server, peer, "default", log_dir).latency(args.n, 120)
                print(f"pass {number}: Redis, this tree: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
