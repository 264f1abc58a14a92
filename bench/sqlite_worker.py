"""The SQLite broker as a user runs it: ``python -m bench.sqlite_worker [--processes 1,2,4] [--reps N]``.

For each worker shape, fills a fresh database with ``--tasks`` no-op tasks, starts ``conveyor worker
tasks:app`` (defaults, or ``--worker-args``) and times the drain from the worker's start until every
task is completed (startup included, as a user sees it), with the worker's CPU per task. Then, with an
idle single worker, enqueues one task at a time at ``--rate`` per second and reports the idle-to-claim
latency (``started_at - enqueued_at`` of each record, both read from one clock). Beside it: a bare
one-row WAL transaction and one ``enqueue`` call at the same ``synchronous`` setting, in this process.
The shapes run in turn ``--reps`` times, so a slow phase of the machine weighs on all of them alike.
``--separate`` starts N ``conveyor worker`` commands instead of one with ``-p N``; each worker process
counts the tasks it ran (fairness). To compare with other code, run it with ``PYTHONPATH`` pointing at
that code's ``src`` (the workers inherit it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.counting_app import completed, shares, start_worker, write_app
from conveyor import Conveyor

__all__ = ["main"]


def _app(directory: Path, synchronous: str) -> tuple[Conveyor, str]:
    url = f"sqlite:///{directory / 'bench.db'}?synchronous={synchronous}"
    write_app(directory, url)
    return Conveyor(url), url


def _stop(proc: subprocess.Popen[bytes]) -> float:
    """Stop the worker (SIGTERM, a graceful stop) and return its CPU seconds, children included."""
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _locked_lines(directory: Path) -> int:
    """Lines of the worker's output that mention a locked database (the aim: none)."""
    lines = [line for log in directory.glob("worker*.log") for line in log.read_text(errors="replace").splitlines()]
    return sum(1 for line in lines if "locked" in line.lower())


def _shares(directory: Path) -> str:
    """How many tasks each worker process ran (each writes its count as it exits)."""
    return " / ".join(f"{n:,}" for n in shares(directory)) or "not counted"


def drain(
    tasks: int, processes: int, synchronous: str, worker_args: list[str], separate: bool
) -> tuple[float, float, str]:
    """Tasks per second, worker CPU µs per task and each process's share of one drain (``separate``: N
    commands, not ``-p N``)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        app, _ = _app(directory, synchronous)
        noop = app.task(name="noop")(lambda: None)
        for start in range(0, tasks, 10_000):
            noop.enqueue_many([((), {})] * min(10_000, tasks - start))
        args = [*worker_args, "-p", str(processes)] if processes > 1 and not separate else worker_args
        begin = time.perf_counter()
        procs = [start_worker(directory, args, n) for n in range(processes if separate else 1)]
        try:
            while completed(app) < tasks:
                if any(proc.poll() is not None for proc in procs):
                    raise RuntimeError("a worker exited early")
                time.sleep(0.01)
            elapsed = time.perf_counter() - begin
        finally:
            cpu = sum(_stop(proc) for proc in procs)
        app.broker.close()
        locked = _locked_lines(directory)
        if locked:
            print(f"  {locked} worker log line(s) mention a locked database", file=sys.stderr)
        return tasks / elapsed, cpu / tasks * 1e6, _shares(directory) if processes > 1 else ""


def latency(count: int, rate: float, synchronous: str, worker_args: list[str]) -> tuple[float, float]:
    """p50 and p99 (ms) of enqueue-to-claim for tasks enqueued one at a time at ``rate`` per second."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        app, _ = _app(directory, synchronous)
        noop = app.task(name="noop")(lambda: None)
        proc = start_worker(directory, worker_args)
        try:
            noop.enqueue()  # the worker is up once this one completes
            while completed(app) < 1:
                time.sleep(0.01)
            handles = []
            next_at = time.perf_counter()
            for _ in range(count):
                next_at += 1 / rate
                time.sleep(max(0.0, next_at - time.perf_counter()))
                handles.append(noop.enqueue())
            while completed(app) < count + 1:
                time.sleep(0.01)
        finally:
            _stop(proc)
        waits = []
        for handle in handles:
            rec = app.broker.get(handle.id, app.now())
            assert rec is not None and rec.started_at is not None
            waits.append((rec.started_at - rec.enqueued_at) * 1000)
        app.broker.close()
        waits.sort()
        return statistics.median(waits), waits[int(len(waits) * 0.99)]


def floors(synchronous: str, count: int = 2000, directory: Path | None = None) -> tuple[float, float]:
    """µs per bare one-row WAL transaction and per one-task ``enqueue``, in this process, on files in
    ``directory`` (default: the system's temporary directory)."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        conn = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        start = time.perf_counter()
        for i in range(count):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (str(i),))
            conn.execute("COMMIT")
        bare = (time.perf_counter() - start) / count * 1e6
        conn.close()
        app, _ = _app(Path(tmp), synchronous)
        noop = app.task(name="noop")(lambda: None)
        start = time.perf_counter()
        for _ in range(count):
            noop.enqueue()
        one = (time.perf_counter() - start) / count * 1e6
        app.broker.close()
        return bare, one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--processes", default="1", help="comma-separated worker process counts")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--latency-tasks", type=int, default=1000, help="0 skips the latency run")
    parser.add_argument("--separate", action="store_true", help="N `conveyor worker` commands, not -p N")
    parser.add_argument("--worker-args", default="", help="extra `conveyor worker` arguments")
    args = parser.parse_args()
    worker_args = args.worker_args.split()
    shapes = [int(p) for p in args.processes.split(",")]
    print(f"synchronous={args.synchronous}, {args.tasks} tasks, worker args {worker_args or 'defaults'}")
    for rep in range(args.reps):
        for processes in shapes:
            rate, cpu, shares = drain(args.tasks, processes, args.synchronous, worker_args, args.separate)
            shape = f"{processes} command(s)" if args.separate else f"-p {processes}"
            print(f"rep {rep + 1}: {shape}: drain {rate:,.0f}/s, worker CPU {cpu:.0f} µs/task", end="")
            print(f", tasks per process {shares}" if shares else "")
        bare, one = floors(args.synchronous)
        print(f"rep {rep + 1}: bare WAL transaction {bare:.0f} µs, enqueue one {one:.0f} µs ({one / bare:.2f}x)")
        if args.latency_tasks:
            p50, p99 = latency(args.latency_tasks, args.rate, args.synchronous, worker_args)
            print(f"rep {rep + 1}: latency at {args.rate:g}/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
