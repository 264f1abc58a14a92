"""The benchmark harness keeps working: a smoke run (N=500, Conveyor only) completes and reports figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_smoke_run_writes_a_report_with_measured_figures(tmp_path: Path) -> None:
    env = {**os.environ, "N": "500", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--no-peers", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tmp_path / "benchmarks.md").read_text()
    assert "| Conveyor (memory) |" in report
    figures = json.loads((tmp_path / "results.json").read_text())["figures"]
    measured = {(f["library"], f["workload"]): f["value"] for f in figures if f["value"] is not None}
    assert measured[("server floor", "round_trip")] > 0
    assert measured[("Conveyor (memory)", "enqueue_single")] > 0
    assert any(library == "Conveyor (sqlite)" and workload == "drain" for library, workload in measured)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_redis_benchmark_runs_and_reports_server_time_per_task() -> None:
    small = ["--tasks", "2000", "--single", "200", "--latency-tasks", "40", "--concurrency", "20"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_redis", *small],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    server_times = [float(line.split()[4]) for line in lines if line.startswith("server time per task")]
    assert len(server_times) == 3 and all(usec > 0 for usec in server_times), done.stdout
    assert any(line.startswith("drain, Worker.run()") for line in lines), done.stdout
