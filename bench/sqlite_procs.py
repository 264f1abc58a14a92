"""``python -m bench.sqlite_procs``: several worker processes on one SQLite file (issue 42).

For each shape (1, 2, 4 processes by default) it starts the workers on an empty file, as a user
does: ``--mode commands`` starts N separate ``python -m conveyor worker tasks:app`` commands,
``--mode pool`` one ``python -m conveyor worker tasks:app -p N`` (a supervisor and N children).
Once every process has registered, it enqueues ``--tasks`` no-op tasks in one transaction and
times the drain from that commit to the last completion, with the CPU of the worker processes
(children included) over that span. Each worker process counts the tasks it ran (written as it
exits), which gives the shares between processes (fairness), and its log is searched for any line
that mentions a locked database and for lines at WARNING or above.

Each repetition (``--reps``) runs one command, then each other shape followed by one command again,
and gives each shape's drain rate as a ratio to the mean of the one-command drains just before and
after it (``over_one``; the aim: 2 and 4 processes at least as fast as one): the load of the shared
host moves within a minute, and a shape compared with one reference drain of its repetition, run up
to a minute apart, gave ratios from 0.85x to 1.7x in two passes of the same code. Each repetition
starts one shape further on (``--rotate``: that many more), and with ``--reps`` the command ends with
each shape's median drain, CPU and ratio, with the ratios' range.

The default drain is 60,000 tasks (about 2 s on 2 cores): at 20,000 a drain lasted 0.6 s and the
ratios moved by a third between repetitions with nothing changed. The drain's end is read from the
per-minute history counters (``counting_app.completed``), a few rows: counting the tasks table took
most of a core from the workers it timed.

Importable: ``curve(n_tasks, processes, mode)`` returns one dict per shape (see :func:`curve`).
``--json`` prints one JSON line instead, ``{"points": [...]}`` (each with its ``label``, in the order
run; every shape but the reference with ``reference`` and ``over_one``), for ``make bench``
(``bench/sqlite_runs.py``); ``--dir`` puts the files on the disk of the run's databases. The workers
may use every core whatever affinity the command inherited: the harness pins its clients to one,
where N processes could not add up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.counting_app import completed, shares, start_worker, write_app
from bench.procs import tree_cpu
from conveyor import Conveyor

__all__ = ["MODES", "TASKS", "curve", "describe", "drain", "main", "order", "shape_label"]

#: ``commands``: N separate ``conveyor worker`` commands; ``pool``: one ``conveyor worker -p N``.
MODES = ("commands", "pool")
#: Tasks per drain by default.
TASKS = 60_000
#: The log levels a point counts as ``warning_lines``.
_LOUD = ("WARNING", "ERROR", "CRITICAL")


def shape_label(mode: str, processes: int) -> str:
    """``-p 2`` or ``2 commands``: how the report names a shape (``mode`` as in :data:`MODES`)."""
    if mode == "pool":
        return f"-p {processes}"
    return f"{processes} command" + ("s" if processes > 1 else "")


def order(modes: Sequence[str], counts: Sequence[int], rep: int) -> list[tuple[str, int]]:
    """The drains of repetition ``rep`` (from 0): one command, then every other shape (each mode by each
    count, started ``rep`` shapes on), each followed by one command again."""
    reference = ("commands", 1)
    shapes = [(mode, count) for mode in modes for count in counts if (mode, count) != reference]
    first = rep % len(shapes) if shapes else 0
    return [reference, *(drain for shape in shapes[first:] + shapes[:first] for drain in (shape, reference))]


def _pair(points: list[dict[str, Any]]) -> None:
    """Give each point of one repetition (in :func:`order`'s order) but the reference ``reference``, the
    mean rate of the one-command drains before and after it, and ``over_one``, its rate over that."""
    for index, point in enumerate(points):
        if point["label"] == shape_label("commands", 1):
            continue
        around = [p["rate"] for p in (points[index - 1], points[index + 1]) if p["label"] == shape_label("commands", 1)]
        point["reference"] = sum(around) / len(around)
        point["over_one"] = point["rate"] / point["reference"]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (a graceful stop, so each process writes its count), then SIGKILL after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_registered(app: Conveyor, count: int, procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(app.broker.workers(app.now())) < count:
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("a worker exited before it started")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} workers did not register within {timeout:.0f} s")
        time.sleep(0.01)


def _log_lines(directory: Path) -> list[str]:
    return [line for log in directory.glob("worker*.log") for line in log.read_text(errors="replace").splitlines()]


def drain(
    n_tasks: int,
    processes: int,
    mode: str,
    synchronous: str = "FULL",
    worker_args: Sequence[str] = (),
    directory: Path | None = None,
) -> dict[str, Any]:
    """One drain of ``n_tasks`` by ``processes`` worker processes in ``mode`` (see :data:`MODES`), on a
    fresh file in a temporary directory in ``directory`` (default: the system's)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    with tempfile.TemporaryDirectory(prefix="conveyor-procs-", dir=directory) as tmp:
        directory = Path(tmp)
        url = f"sqlite:///{directory / 'bench.db'}?synchronous={synchronous}"
        write_app(directory, url)
        app = Conveyor(url)
        noop = app.task(name="noop")(lambda: None)
        if mode == "pool":
            procs = [start_worker(directory, [*worker_args, "-p", str(processes)], 0, new_session=True)]
        else:
            procs = [start_worker(directory, list(worker_args), n, new_session=True) for n in range(processes)]
        try:
            _wait_registered(app, processes, procs, 60.0)
            cpu_before = sum(tree_cpu(proc.pid) for proc in procs)
            noop.enqueue_many([((), {})] * n_tasks)
            begin = time.perf_counter()
            deadline = time.monotonic() + max(120.0, n_tasks / 100)
            while completed(app) < n_tasks:
                if any(proc.poll() is not None for proc in procs):
                    raise RuntimeError("a worker exited during the drain")
                if time.monotonic() > deadline:
                    raise RuntimeError("the drain did not finish in time")
                time.sleep(0.005)
            elapsed = time.perf_counter() - begin
            cpu = sum(tree_cpu(proc.pid) for proc in procs) - cpu_before
        finally:
            _stop(procs)
            app.broker.close()
        counts = shares(directory)
        counts += [0] * (processes - len(counts))  # a process that ran nothing wrote no count
        lines = _log_lines(directory)
        return {
            "mode": mode,
            "processes": processes,
            "tasks": n_tasks,
            "synchronous": synchronous,
            "rate": n_tasks / elapsed,
            "seconds": elapsed,
            "cpu_us": cpu / n_tasks * 1e6,
            "shares": counts,
            "locked_lines": sum(1 for line in lines if "locked" in line.lower()),
            "warning_lines": sum(1 for line in lines if any(f" {level} " in line for level in _LOUD)),
            "label": shape_label(mode, processes),
        }


def curve(
    n_tasks: int = TASKS,
    processes: Sequence[int] = (1, 2, 4),
    mode: str = "commands",
    synchronous: str = "FULL",
    worker_args: Sequence[str] = (),
    directory: Path | None = None,
) -> list[dict[str, Any]]:
    """Drain ``n_tasks`` once per process count; one dict per count, in order.

    Each dict: ``mode``, ``processes``, ``tasks``, ``synchronous``, ``rate`` (tasks/s), ``seconds``,
    ``cpu_us`` (worker CPU per task, supervisor and children included; read in 10 ms ticks),
    ``shares`` (tasks each worker process ran, largest first, one per process), ``locked_lines``
    (log lines mentioning a locked database: the aim is 0), ``warning_lines`` (log lines at
    WARNING or above) and ``label`` (:func:`shape_label`).
    """
    return [drain(n_tasks, count, mode, synchronous, worker_args, directory) for count in processes]


def describe(point: dict[str, Any]) -> str:
    """One line for a point of :func:`curve` or of a repetition (with its ``over_one`` if it has one)."""
    shape = f"{point['processes']} command(s)" if point["mode"] == "commands" else f"-p {point['processes']}"
    total = sum(point["shares"]) or 1
    shares = " / ".join(f"{100 * s / total:.0f}%" for s in point["shares"])
    text = f"{shape:14s} drain {point['rate']:8,.0f}/s, CPU {point['cpu_us']:5.0f} µs/task"
    if "over_one" in point or point["label"] == shape_label("commands", 1):
        text += f", {point.get('over_one', 1.0):.2f}x one command"
    if point["processes"] > 1:
        text += f", shares {shares}"
    return text + f", locked lines {point['locked_lines']}, warnings {point['warning_lines']}"


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summary(points: Sequence[dict[str, Any]]) -> list[str]:
    """Per shape over the repetitions: the median drain and CPU, and the median ``over_one`` with its range."""
    lines = []
    for label in dict.fromkeys(
        p["label"] for p in sorted(points, key=lambda p: (p["mode"] != "commands", p["processes"]))
    ):
        rows = [p for p in points if p["label"] == label]
        cpu = _median([p["cpu_us"] for p in rows])
        text = f"{label:14s} drain {_median([p['rate'] for p in rows]):8,.0f}/s median, CPU {cpu:5.1f} µs/task"
        ratios = [p["over_one"] for p in rows if "over_one" in p]
        if ratios:
            text += f", {_median(ratios):.2f}x one command ({min(ratios):.2f}-{max(ratios):.2f})"
        lines.append(text)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_procs", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--processes", default="1,2,4", help="comma-separated process counts")
    parser.add_argument("--mode", default="commands,pool", help="comma-separated: commands, pool")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--rotate", type=int, default=0, help="start the first repetition this many shapes on")
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--worker-args", default="", help="extra `conveyor worker` arguments")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: the system's tmp)")
    parser.add_argument("--json", action="store_true", help='one JSON line, {"points": [...]}, for the harness')
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.processes.split(",") if p]
    modes = [m for m in args.mode.split(",") if m]
    extra = args.worker_args.split()
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the workers inherit it
    points: list[dict[str, Any]] = []
    if not args.json:
        print(
            f"{os.cpu_count()} CPUs, synchronous={args.synchronous}, {args.tasks:,} tasks, args {extra or 'defaults'}"
        )
    for rep in range(args.reps):
        done = []
        for mode, count in order(modes, counts, args.rotate + rep):
            done.append(drain(args.tasks, count, mode, args.synchronous, extra, args.dir))
            if not args.json:
                print(f"  ({done[-1]['label']}: {done[-1]['rate']:,.0f}/s)", flush=True)
        _pair(done)
        points += done
        if not args.json:
            for point in done:
                print(f"rep {rep + 1}: {describe(point)}", flush=True)
    if args.json:
        print(json.dumps({"points": points}))
    elif args.reps > 1:
        print(f"over {args.reps} repetitions:", *summary(points), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
