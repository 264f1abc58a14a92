"""``make demo`` runs the real demo: worker processes on SQLite, ending by itself with a summary."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_every_task_through_real_workers_and_ends_by_itself() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"}
    proc = subprocess.run([sys.executable, "-m", "conveyor.demo"], env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Summary" in proc.stdout
    assert "archived by reason: {'permanent': 5}" in proc.stdout
    assert "exit codes [0, 0]" in proc.stdout
