"""Drain through the real worker runtime: ``python bench/bench_runtime.py``.

Enqueues N no-op tasks, then runs ``Worker.run()`` (fetcher, thread pool, acker, heartbeat, ...) in
this process until every task has run, for memory and SQLite. This is the end-to-end figure; the
broker-level ones (claim + settle loops with no runtime) are in ``bench_sqlite.py`` and
``bench_redis.py``. Options: ``--tasks N``, ``--concurrency N``, ``--prefetch N``, ``--reps N``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, Task


def counted_noop(app: Conveyor, tasks: int) -> tuple[Task[[], None], threading.Event]:
    """Register ``noop``, a task that does nothing; the event is set once it has run ``tasks`` times."""
    done = threading.Event()
    lock = threading.Lock()
    count = [0]

    @app.task
    def noop() -> None:
        with lock:
            count[0] += 1
            if count[0] == tasks:
                done.set()

    return noop, done


def run_worker_until(app: Conveyor, done: threading.Event, **settings: Any) -> float:
    """Seconds from starting ``Worker.run()`` (on a thread) until ``done`` is set; the worker is then stopped."""
    worker = app.worker(**settings)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    started = time.perf_counter()
    thread.start()
    done.wait()
    elapsed = time.perf_counter() - started
    worker.stop()
    thread.join()
    return elapsed


def drain(url: str, tasks: int, concurrency: int, prefetch: int) -> float:
    """Tasks per second from starting the worker until the last handler ran."""
    app = Conveyor(url)
    noop, done = counted_noop(app, tasks)
    noop.enqueue_many([((), {})] * tasks)
    elapsed = run_worker_until(app, done, concurrency=concurrency, prefetch=prefetch)
    app.close()
    return tasks / elapsed


def _url(backend: str, path: Path) -> str:
    return "memory://" if backend == "memory" else f"sqlite:///{path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("memory", "sqlite"):
            rates = [
                drain(_url(name, Path(tmp) / f"r{i}.db"), args.tasks, args.concurrency, args.prefetch)
                for i in range(args.reps)
            ]
            print(
                f"{name:7} drain through Worker.run(): median {statistics.median(rates):9,.0f} tasks/s "
                f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; concurrency {args.concurrency}, "
                f"prefetch {args.prefetch}, {args.tasks} tasks)"
            )


if __name__ == "__main__":
    main()
