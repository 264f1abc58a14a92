"""``bench.sqlite_procs`` keeps working: the 1/2-process curve of both shapes, from its function and its command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python(*args: str) -> str:
    """``python <args>`` from the repository's root with ``bench`` importable: its stdout (exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=100, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(110)
@pytest.mark.parametrize("mode", ["commands", "pool"])
def test_the_curve_gives_one_point_per_process_count(mode: str) -> None:
    call = f"curve(400, (1, 2), {mode!r}, 'NORMAL')"
    script = f"import json; from bench.sqlite_procs import curve; print(json.dumps({call}))"
    points: list[dict[str, Any]] = json.loads(_python("-c", script))
    assert [(p["mode"], p["processes"], p["tasks"]) for p in points] == [(mode, 1, 400), (mode, 2, 400)]
    for point in points:
        assert point["rate"] > 0 and point["cpu_us"] >= 0  # (CPU is read in 10 ms ticks: 400 tasks may take 0)
        assert sum(point["shares"]) == 400 and len(point["shares"]) == point["processes"]
        assert point["locked_lines"] == 0 and point["warning_lines"] == 0


@pytest.mark.slow
@pytest.mark.timeout(110)
def test_the_command_prints_each_shape_against_one_command() -> None:
    out = _python("-m", "bench.sqlite_procs", "--tasks", "300", "--processes", "1,2", "--synchronous", "NORMAL")
    for shape in (r"1 command\(s\)", r"2 command\(s\)", "-p 1", "-p 2"):
        assert re.search(rf"rep 1: {shape} +drain +[\d,]+/s, CPU +\d+ µs/task, [\d.]+x one command", out), out
    assert re.search(r"2 command\(s\).*shares \d+% / \d+%, locked lines 0, warnings 0", out), out
