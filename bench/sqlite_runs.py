"""The SQLite-only parts of a ``make bench`` pass (issue 42): the floor and the process curve.

Each pass measures, on the disk of the run's SQLite files: the bare one-row WAL commit rate and one
``enqueue`` call's rate at ``synchronous=FULL`` and ``NORMAL`` (``bench/sqlite_floors.py``, library
``sqlite floor``, one variant per mode), and the drain of 1, 2 and 4 ``conveyor worker`` processes on
one file, as N commands and as ``-p N`` (``bench/sqlite_procs.py``, library ``sqlite processes``,
one variant per shape, 3N tasks a drain). Each runs in its own subprocess, so the harness never opens a database.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.sqlite_floors import MODES
from bench.sqlite_procs import shape_label

if TYPE_CHECKING:
    from bench.suite import Suite

__all__ = ["CURVE", "CURVE_TASKS_PER_N", "FLOOR", "sqlite_curve", "sqlite_floors"]

FLOOR = "sqlite floor"
CURVE = "sqlite processes"
#: The curve drains this many times the run's N tasks per shape.
CURVE_TASKS_PER_N = 3


def sqlite_floors(suite: Suite, sqlite_dir: Path) -> None:
    """One pass of the floor: bare commits/s and one-task enqueues/s per ``synchronous`` mode."""
    figures = {
        (mode, w): suite.fig(FLOOR, f"synchronous={mode}", w) for mode in MODES for w in ("commit", "enqueue_single")
    }

    def once() -> None:
        cmd = ["-m", "bench.sqlite_floors", str(sqlite_dir), str(suite.plan.floor_commits)]
        result = suite.run_json(cmd, 600)
        for mode in MODES:
            figures[(mode, "commit")].runs.append(float(result[f"commit_{mode}"]))
            figures[(mode, "enqueue_single")].runs.append(float(result[f"enqueue_{mode}"]))
        suite.settings.setdefault(FLOOR, {})["default"] = str(result["default"])

    suite.once(list(figures.values()), once)


def sqlite_curve(suite: Suite, sqlite_dir: Path) -> None:
    """One pass of the curve: one command, then every other shape (N commands, ``-p N``) each followed by
    one command again (``bench/sqlite_procs.py``), each on a fresh file. The one command's figures take
    the mean of its drains in the pass; each other shape's ``over_one``, its ratio to the two beside it."""
    shapes = suite.plan.curve_shapes
    n = CURVE_TASKS_PER_N * suite.plan.n  # a drain of N tasks lasted 0.6 s: startup and noise made the ratios
    labels = [shape_label(mode, p) for mode in ("commands", "pool") for p in shapes]
    one = shape_label("commands", 1)
    workloads = ("drain", "worker_cpu", "share_min", "locked", "warnings")
    figures = {(label, w): suite.fig(CURVE, label, w) for label in labels for w in workloads}
    figures.update({(label, "over_one"): suite.fig(CURVE, label, "over_one") for label in labels if label != one})
    work = Path(tempfile.mkdtemp(dir=sqlite_dir, prefix="curve-"))

    def once() -> None:
        cmd = ["-m", "bench.sqlite_procs", "--json", "--dir", str(work), "--tasks", str(n)]
        # each pass starts one shape further on, so a slow phase of the host does not always meet one shape
        cmd += ["--processes", ",".join(map(str, shapes)), "--rotate", str(len(figures[(labels[0], "drain")].runs))]
        result = suite.run_json(cmd, 300 + 4 * len(labels) * max(60.0, n / 500))
        for label in labels:
            points = [point for point in result["points"] if point["label"] == label]
            if not points:
                continue

            def mean(key: str, points: list[dict[str, Any]] = points) -> float:
                return sum(float(point[key]) for point in points) / len(points)

            figures[(label, "drain")].runs.append(mean("rate"))
            figures[(label, "worker_cpu")].runs.append(mean("cpu_us"))
            figures[(label, "share_min")].runs.append(100.0 * min(min(point["shares"]) for point in points) / n)
            figures[(label, "locked")].runs.append(float(sum(point["locked_lines"] for point in points)))
            figures[(label, "warnings")].runs.append(float(sum(point["warning_lines"] for point in points)))
            if label != one:
                figures[(label, "over_one")].runs.append(mean("over_one"))

    try:
        suite.once(list(figures.values()), once)
    finally:
        shutil.rmtree(work, ignore_errors=True)
