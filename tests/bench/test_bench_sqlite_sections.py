"""Issue 42's SQLite sections of ``make bench``: the process curve (``bench.sqlite_procs --json``, as the
harness runs it) drains with real ``conveyor worker`` commands and counts every task once; the report
takes each aim's ratio pass by pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_python(*args: str, timeout: float) -> str:
    """``python <args>`` from the repository's root, with ``bench`` importable: its output (exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def processes_under(directory: Path) -> list[int]:
    """Processes whose working directory is in ``directory`` (the curve's workers run in theirs)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")).is_relative_to(directory):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_curve_drains_with_each_shape_and_every_task_runs_once(tmp_path: Path) -> None:
    args = ("--json", "--dir", str(tmp_path), "--tasks", "300", "--processes", "1,2", "--synchronous", "NORMAL")
    out = run_python("-m", "bench.sqlite_procs", *args, timeout=110)
    points = json.loads(out.splitlines()[-1])["points"]
    # one command first and after each other shape: each is compared with the one-command drains beside it
    labels = ["1 command", "2 commands", "1 command", "-p 1", "1 command", "-p 2", "1 command"]
    assert [p["label"] for p in points] == labels, points
    for before, point, after in zip(points[:-1:2], points[1::2], points[2::2], strict=True):
        assert point["over_one"] == pytest.approx(point["rate"] / ((before["rate"] + after["rate"]) / 2))
    for point in points:
        assert sum(point["shares"]) == 300, point  # each process counted its own; none ran a task twice
        assert len(point["shares"]) == point["processes"], point
        assert point["rate"] > 0 and point["cpu_us"] >= 0, point
        assert point["locked_lines"] == 0 and point["warning_lines"] == 0, point
    # CPU is read in clock ticks (10 ms): 150 tasks of one process can fit in none, four drains cannot
    assert sum(point["cpu_us"] for point in points) > 0, points
    assert processes_under(tmp_path) == []  # every worker and every supervisor child stopped
    assert list(tmp_path.iterdir()) == []  # the files went in --dir, and went


def fig(library: str, variant: str, workload: str, runs: list[float], higher: bool = True) -> dict[str, Any]:
    return {
        "library": library,
        "variant": variant,
        "workload": workload,
        "metric": workload,
        "unit": "",
        "runs": runs,
        "note": "",
        "higher_is_better": higher,
    }


REPORT = """
import json, sys
from pathlib import Path
from bench.report import write_report

write_report(json.loads(sys.argv[1]), Path(sys.argv[2]))
"""


def test_the_report_gives_each_aim_of_issue_42_pass_by_pass(tmp_path: Path) -> None:
    huey = "Huey (SqliteHuey, {})"
    data = {
        "meta": {"date": "d", "n": 1, "reps": 2, "nproc": 2, "cpu": "c", "python": "3", "placement": "p"},
        "settings": {"sqlite floor": {"default": "FULL"}},
        "figures": [
            # best SqliteHuey per pass: 3000 then 4000; Conveyor 9000 then 12000: 3x in each pass (the
            # ratio of medians, 10500 / 3000, would say 3.5x)
            fig("Conveyor (sqlite)", "default", "drain", [9000.0, 12000.0]),
            fig(huey.format("1 thread"), "default", "drain", [3000.0, 2000.0]),
            fig(huey.format("8 threads"), "default", "drain", [2000.0, 4000.0]),
            fig("Conveyor (redis)", "default", "drain", [10000.0, 20000.0]),
            fig("Conveyor (sqlite)", "default", "latency_p50", [0.5, 1.5], higher=False),
            fig("Conveyor (sqlite)", "default", "latency_p99", [4.0, 4.5], higher=False),
            # an enqueue costs 1000/600 and 2000/800 of a bare commit's time
            fig("sqlite floor", "synchronous=FULL", "commit", [1000.0, 2000.0]),
            fig("sqlite floor", "synchronous=FULL", "enqueue_single", [600.0, 800.0]),
            fig("sqlite floor", "synchronous=NORMAL", "commit", [10000.0, 12000.0]),
            fig("sqlite floor", "synchronous=NORMAL", "enqueue_single", [6000.0, 5000.0]),
            fig("sqlite processes", "1 command", "drain", [5000.0, 6000.0]),
            fig("sqlite processes", "2 commands", "drain", [6000.0, 5400.0]),
            fig("sqlite processes", "2 commands", "share_min", [40.0, 45.0]),
            fig("sqlite processes", "2 commands", "locked", [0.0, 0.0], higher=False),
            # paired with the one-command drains beside it: its own ratios, not its drain over the pass's
            fig("sqlite processes", "4 commands", "drain", [4000.0, 7000.0]),
            fig("sqlite processes", "4 commands", "over_one", [1.1, 0.9]),
        ],
    }
    run_python("-c", REPORT, json.dumps(data), str(tmp_path / "report.md"), timeout=30)
    lines = (tmp_path / "report.md").read_text().splitlines()

    def row(start: str) -> str:
        found = [line for line in lines if line.startswith(start)]
        assert len(found) == 1, (start, lines)
        return found[0]

    assert row("| drain ≥ 3x") == "| drain ≥ 3x the best `SqliteHuey` consumer | 3.00x (3.00-3.00) | 2 of 2 passes |"
    assert row("| drain ≥ 0.8x") == "| drain ≥ 0.8x `conveyor worker` on Redis | 0.75x (0.60-0.90) | 1 of 2 passes |"
    assert row("| idle-to-running p50") == (
        "| idle-to-running p50 at 200/s < 1 ms | 0.50, 1.50 ms; a bare commit: 0.67 ms | 1 of 2 passes |"
    )
    assert row("| idle-to-running p99") == (
        "| idle-to-running p99 at 200/s < 5 ms | 4.00, 4.50 ms; a bare commit: 0.67 ms | 2 of 2 passes |"
    )
    assert row("| one `enqueue` ≤ 2x a bare commit (FULL") == (
        "| one `enqueue` ≤ 2x a bare commit (FULL, the default) | 2.08x (1.67-2.50) | 1 of 2 passes |"
    )
    assert row("| one `enqueue` ≤ 2x a bare commit (NORMAL") == (
        "| one `enqueue` ≤ 2x a bare commit (NORMAL) | 2.03x (1.67-2.40) | 1 of 2 passes |"
    )
    assert (
        row("| FULL (Conveyor's default) |")
        == "| FULL (Conveyor's default) | 1,500 | 700 | 2.08x (1.67-2.50) | 1 of 2 passes |"
    )
    assert row("| 2 and 4 processes") == (
        "| 2 and 4 processes drain ≥ 1 command (every shape, every pass) | 1.00x (0.90-1.20) "
        "| 2 of 4 drains (shapes by passes) |"
    )
    assert row("| 4 commands |").startswith("| 4 commands | 5,500 | 1.00x (0.90-1.10) |")
    assert row("| 2 commands |") == "| 2 commands | 5,700 | 1.05x (0.90-1.20) | — | 42.5% (even: 50%) | 0 | — |"
    assert row("| 1 command |").startswith("| 1 command | 5,500 | reference |")
    # the floor and the curve are sections of their own, not rows of the results table or peers
    assert not [line for line in lines if line.startswith(("| sqlite floor |", "| sqlite processes |"))]
    assert not any("**sqlite floor**" in line for line in lines)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_latency_row_runs_alone_on_this_tree_and_on_another(tmp_path: Path) -> None:
    out = run_python(
        "-m", "bench.sqlite_latency", "--passes", "1", "--n", "40", "--code", str(ROOT / "src"), timeout=110
    )
    lines = out.splitlines()
    assert [line.split(": ")[1] for line in lines] == ["bare FULL commit at 200/s", "this tree", str(ROOT / "src")]
    for line in lines:
        p50, p99 = (float(part.split()[1]) for part in line.split(": ")[2].split(", "))
        assert 0 < p50 <= p99, line


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_latency_row_runs_at_synchronous_normal_when_asked() -> None:
    out = run_python("-m", "bench.sqlite_latency", "--passes", "1", "--n", "40", "--synchronous", "normal", timeout=110)
    lines = out.splitlines()
    assert [line.split(": ")[1] for line in lines] == ["bare NORMAL commit at 200/s", "this tree"]
    for line in lines:
        p50, p99 = (float(part.split()[1]) for part in line.split(": ")[2].split(", "))
        assert 0 < p50 <= p99, line


HARNESS_PASSES = """
import json, sys
from pathlib import Path
from bench.sqlite_runs import sqlite_curve
from bench.suite import Plan, Suite

suite = Suite(None, Plan(n=100, reps=2, latency_n=0, time_cap=600.0, curve_shapes=(1, 2)), Path(sys.argv[1]), print)
for _ in range(2):
    sqlite_curve(suite, Path(sys.argv[1]))
figures = [(f.variant, f.workload, f.runs, f.note) for f in suite.figures]
print(json.dumps(figures))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_harness_pass_keeps_one_figure_a_shape_and_pairs_the_ratios(tmp_path: Path) -> None:
    out = run_python("-c", HARNESS_PASSES, str(tmp_path), timeout=290)
    figures = {(variant, workload): (runs, note) for variant, workload, runs, note in json.loads(out.splitlines()[-1])}
    assert ("1 command", "over_one") not in figures  # the reference has no ratio of its own
    for label in ("1 command", "2 commands", "-p 1", "-p 2"):
        for workload in ("drain", "worker_cpu", "share_min", "locked", "warnings"):
            runs, note = figures[(label, workload)]
            assert len(runs) == 2 and not note, (label, workload, runs, note)  # one a pass, from the mean
        assert figures[(label, "locked")][0] == [0.0, 0.0]
        # a share, not fairness: 100 tasks may all go to the process that started first on a loaded
        # machine (tests/cli/test_shared_sqlite_file.py holds claims fair between processes)
        assert all(0 <= share <= 100 for share in figures[(label, "share_min")][0])
        if label != "1 command":
            assert all(ratio > 0 for ratio in figures[(label, "over_one")][0])
