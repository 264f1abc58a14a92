"""SQLite ``synchronous=FULL`` against ``NORMAL``: ``python -m bench.sqlite_sync``.

Per mode, on a fresh database file: ``app.enqueue`` one task at a time (one commit each), then a
drain of those tasks by ``Worker.run()`` (batched claims and settles, as in production), then the
same number enqueued again and drained one task per claim by ``run_until_idle()`` (two commits per
task: the case where a sync per commit weighs most). The modes alternate within each repetition, so
a slow phase of a shared machine weighs on both alike: compare the ratios of one repetition, not
figures of different runs. The file goes in ``--dir`` (default: the system's temporary directory),
which must be on the disk whose fsync you want to measure (a tmpfs syncs for free). Options:
``--tasks N``, ``--reps N``, ``--concurrency N``, ``--dir PATH``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_runtime import counted_noop, run_worker_until
from conveyor import Conveyor

MODES = ("NORMAL", "FULL")


def run_mode(path: Path, mode: str, tasks: int, concurrency: int) -> dict[str, float]:
    """Tasks per second for the three phases on a fresh file at ``path``."""
    app = Conveyor(f"sqlite:///{path}?synchronous={mode.lower()}")
    noop, done = counted_noop(app, tasks)
    try:
        started = time.perf_counter()
        for _ in range(tasks):
            noop.enqueue()
        enqueue = tasks / (time.perf_counter() - started)
        drain = tasks / run_worker_until(app, done, concurrency=concurrency)
        for _ in range(tasks):
            noop.enqueue()
        started = time.perf_counter()
        ran = app.worker().run_until_idle()
        one_by_one = ran / (time.perf_counter() - started)
    finally:
        app.close()
    return {"enqueue one by one": enqueue, "Worker.run drain": drain, "drain one per claim": one_by_one}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--dir", default=None, help="where the database files go")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for rep in range(args.reps):
            rates = {
                mode: run_mode(Path(tmp) / f"{rep}-{mode}.db", mode, args.tasks, args.concurrency) for mode in MODES
            }
            print(f"repetition {rep + 1}: tasks/s (FULL/NORMAL)")
            for phase, normal in rates["NORMAL"].items():
                full = rates["FULL"][phase]
                ratios.setdefault(phase, []).append(full / normal)
                print(f"  {phase:<22}NORMAL {normal:>9,.0f}   FULL {full:>9,.0f}   ({full / normal:.2f}x)")
    print(f"median FULL/NORMAL over {args.reps} repetitions of {args.tasks} tasks:")
    for phase, values in ratios.items():
        print(f"  {phase:<22}{statistics.median(values):.2f}x  (range {min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
