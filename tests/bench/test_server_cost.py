"""``python -m bench.server_cost`` keeps counting: a small run under callgrind counts each phase on its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^\s*([\d,]+)  per (.+?)  \(")


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind is not installed")
def test_each_phase_is_counted_on_its_own() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.server_cost", "--tasks", "40", "--singles", "10"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    costs = {m.group(2): int(m.group(1).replace(",", "")) for m in map(LINE.match, done.stdout.splitlines()) if m}
    assert len(costs) == 7, done.stdout
    ping = costs["PING"]
    assert ping > 0
    # every broker call runs a Lua function: several times the work of a PING, per call
    for unit in ("one-task enqueue", "one-task claim", "one-outcome settle"):
        assert costs[unit] > 5 * ping, done.stdout
    # a batch shares a call's fixed cost among its tasks: less per task than a call of one
    assert costs["task of a batch enqueue"] < costs["one-task enqueue"], done.stdout
    assert costs["task of a 500-task claim"] < costs["one-task claim"], done.stdout
    assert costs["outcome of a 500-outcome settle"] < costs["one-outcome settle"], done.stdout
