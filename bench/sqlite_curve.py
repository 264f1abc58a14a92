"""Several worker processes on one SQLite file: ``python -m bench.sqlite_curve DIR N [--shapes 1,2,4]``.

For each shape, on a fresh database in ``DIR``: starts ``conveyor worker tasks:app`` as a user does,
default settings, either as N separate commands or as one command with ``-p N`` (``--modes
commands,p``), waits until they are idle, enqueues ``N`` no-op tasks in batches and waits until
they have all run. Each worker process counts the tasks it ran and stamps its first and last one
(a file per process, rewritten every 20 ms while it changes), so the rate runs from the first
task's start to the last one's end over all processes, start-up excluded. Also: the workers' CPU
per task (their process trees, supervisor included, over the drain), each process's share of the
tasks (fairness), and how many lines of their logs mention a locked database (issue 42's aim:
none) or are at WARNING or above. Prints one JSON line: ``{"tool", "points": [{"mode", "processes",
"rate", "cpu_us", "shares", "locked", "warnings", "label"}, ...]}``. The processes may use every
core: the harness pins its clients to one, where N processes could not add up. With ``--tool auto``
(the default) the multi-process work's own ``bench.sqlite_procs.curve``, when that module exists,
measures the curve instead (``tool`` names which did).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.procs import tree_cpu
from conveyor import Conveyor

__all__ = ["Point", "curve", "drain", "measure", "procs_curve", "shape_label"]

_TASKS_PY = """
import json
import os
import threading
import time

from conveyor import Conveyor

app = Conveyor({url!r})
_lock = threading.Lock()
_state = {{"pid": 0, "count": 0, "first": 0.0, "last": 0.0}}


def _flush() -> None:
    written = -1
    while True:
        time.sleep(0.02)
        with _lock:
            snapshot = dict(_state)
        if snapshot["count"] != written:
            path = f"stats-{{snapshot['pid']}}.json"
            with open(path + ".tmp", "w") as file:
                json.dump(snapshot, file)
            os.replace(path + ".tmp", path)
            written = snapshot["count"]


@app.task
def noop() -> None:
    now = time.time()
    with _lock:
        if _state["pid"] != os.getpid():  # this process's first task (a forked child inherits the state)
            _state.update(pid=os.getpid(), count=0, first=now)
            threading.Thread(target=_flush, daemon=True).start()
        _state["count"] += 1
        _state["last"] = now
"""

#: The workers count as idle once their trees together used less CPU (s) than this over ``_IDLE_WINDOW``:
#: an idle worker wakes every 20 ms, a starting one imports at full speed.
_IDLE_CPU = 0.06
_IDLE_WINDOW = 0.3


@dataclass(frozen=True)
class Point:
    """One drain: ``mode`` ``commands`` (N ``conveyor worker`` commands) or ``p`` (one with ``-p N``)."""

    mode: str
    processes: int
    rate: float
    cpu_us: float
    shares: list[int]
    locked: int
    warnings: int = 0

    @property
    def label(self) -> str:
        return shape_label(self.mode, self.processes)


def shape_label(mode: str, processes: int) -> str:
    """``-p 2`` or ``2 commands``: how the report names a shape."""
    if mode == "p":
        return f"-p {processes}"
    return f"{processes} command" + ("s" if processes > 1 else "")


def _start(directory: Path, args: list[str], number: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "conveyor", "worker", "tasks:app", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), *sys.path])}
    with (directory / f"worker{number}.log").open("wb") as log:  # a file: the default level logs every task
        return subprocess.Popen(command, cwd=directory, env=env, stdout=log, stderr=log)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            threads = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for thread in threads:
            try:
                children = [int(c) for c in (thread / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each command (a graceful stop; a supervisor stops its children), then kill what is left."""
    leftovers = [pid for proc in procs for pid in _descendants(proc.pid)]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in leftovers:  # children of a supervisor run in their own sessions
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _cpu(procs: list[subprocess.Popen[bytes]]) -> float:
    return sum(tree_cpu(proc.pid) for proc in procs)


def _wait_idle(procs: list[subprocess.Popen[bytes]], processes: int, timeout: float = 60.0) -> None:
    """Until every worker process has started and the trees stopped using CPU (imports done)."""
    deadline = time.monotonic() + timeout
    before = _cpu(procs)
    while time.monotonic() < deadline:
        time.sleep(_IDLE_WINDOW)
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("a worker exited early")
        now = _cpu(procs)
        running = len(procs) + sum(len(_descendants(proc.pid)) for proc in procs)
        if now - before < _IDLE_CPU and running >= processes:
            return
        before = now
    raise RuntimeError(f"workers not idle after {timeout:.0f} s")


def _stats(directory: Path) -> list[dict[str, float]]:
    found = []
    for path in directory.glob("stats-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):  # being replaced
            continue
    return found


def _log_lines(directory: Path) -> tuple[int, int]:
    """Lines of the workers' logs that mention a locked database, and lines at WARNING or above."""
    text = "\n".join(log.read_text(errors="replace") for log in directory.glob("worker*.log"))
    lines = text.splitlines()
    warnings = sum(1 for line in lines if any(f" {level} " in line for level in ("WARNING", "ERROR", "CRITICAL")))
    return sum(1 for line in lines if "locked" in line.lower()), warnings


def drain(directory: Path, n: int, processes: int, mode: str, timeout: float = 300.0) -> Point:
    """One drain of ``n`` tasks by ``processes`` worker processes on a fresh file in ``directory``."""
    directory.mkdir(parents=True)
    url = f"sqlite:///{directory / 'bench.db'}"
    (directory / "tasks.py").write_text(_TASKS_PY.format(url=url))
    app = Conveyor(url)
    noop = app.task(name="noop")(lambda: None)
    args = ["-p", str(processes)] if mode == "p" else []
    procs = [_start(directory, args, i) for i in range(1 if mode == "p" else processes)]
    try:
        _wait_idle(procs, processes + (1 if mode == "p" else 0))
        cpu_start = _cpu(procs)
        for start in range(0, n, 10_000):
            noop.enqueue_many([((), {})] * min(10_000, n - start))
        deadline = time.monotonic() + timeout
        while True:
            stats = _stats(directory)
            if sum(s["count"] for s in stats) >= n:
                break
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError("a worker exited early")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not drained after {timeout:.0f} s")
            time.sleep(0.01)
        cpu = _cpu(procs) - cpu_start
    finally:
        _stop(procs)
        app.close()
    first, last = min(s["first"] for s in stats), max(s["last"] for s in stats)
    shares = sorted((int(s["count"]) for s in stats), reverse=True)
    locked, warnings = _log_lines(directory)
    return Point(mode, processes, n / (last - first), cpu / n * 1e6, shares, locked, warnings)


def curve(directory: Path, n: int, shapes: list[int], modes: list[str]) -> list[Point]:
    """A drain for each mode and shape, in turn (shapes inside modes), each on its own file."""
    return [drain(directory / f"{mode}-{processes}", n, processes, mode) for mode in modes for processes in shapes]


def procs_curve(n: int, shapes: list[int], modes: list[str]) -> list[Point] | None:
    """The same curve by ``bench.sqlite_procs.curve`` (the multi-process work's own tool: it times from
    the enqueue's commit to the last completion) when that module is there; None when it is not."""
    try:
        procs: Any = importlib.import_module("bench.sqlite_procs")
    except ImportError:
        return None
    return [
        Point(
            mode,
            int(found["processes"]),
            float(found["rate"]),
            float(found["cpu_us"]),
            [int(share) for share in found["shares"]],
            int(found["locked_lines"]),
            int(found.get("warning_lines", 0)),
        )
        for mode in modes
        for found in procs.curve(n, shapes, "pool" if mode == "p" else "commands")
    ]


def measure(directory: Path, n: int, shapes: list[int], modes: list[str], tool: str) -> tuple[list[Point], str]:
    """The curve and which tool measured it: ``bench.sqlite_procs`` if there (``tool`` ``auto``), else
    this module's (also when that one fails: the table should not stay empty for it)."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the workers inherit it
    failed = ""
    if tool == "auto":
        try:
            points = procs_curve(n, shapes, modes)
        except Exception as exc:
            points, failed = None, f" (bench/sqlite_procs.py failed: {str(exc)[:120]})"
        if points is not None:
            return points, "bench/sqlite_procs.py"
    return curve(directory, n, shapes, modes), "bench/sqlite_curve.py" + failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_curve", description=__doc__)
    parser.add_argument("dir", type=Path)
    parser.add_argument("n", type=int)
    parser.add_argument("--shapes", default="1,2,4")
    parser.add_argument("--modes", default="commands,p")
    parser.add_argument("--tool", choices=("auto", "own"), default="auto")
    args = parser.parse_args(argv)
    shapes = [int(s) for s in args.shapes.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    points, tool = measure(args.dir, args.n, shapes, modes, args.tool)
    print(json.dumps({"tool": tool, "points": [{**asdict(p), "label": p.label} for p in points]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
