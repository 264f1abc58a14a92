"""``bench.sqlite_worker`` keeps working: a small run starts real ``conveyor worker`` commands and reports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(110)
def test_sqlite_worker_benchmark_drains_with_each_shape_and_measures_latency() -> None:
    shapes = ["--tasks", "300", "--processes", "1,2", "--separate", "--latency-tasks", "20"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.sqlite_worker",
            *shapes,
            "--synchronous",
            "NORMAL",
            "--worker-args=--log-level warning",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"1 command\(s\): drain [\d,]+/s, worker CPU \d+ µs/task\n", out), out
    shares = re.search(r"2 command\(s\): drain [\d,]+/s, worker CPU \d+ µs/task, tasks per process ([\d, /]+)\n", out)
    assert shares is not None, out
    assert sum(int(n.replace(",", "")) for n in shares[1].split(" / ")) == 300  # (one may have run them all)
    assert re.search(r"bare WAL transaction \d+ µs, enqueue one \d+ µs", out), out
    assert re.search(r"latency at 200/s: p50 [\d.]+ ms, p99 [\d.]+ ms", out), out
    assert "locked" not in out
