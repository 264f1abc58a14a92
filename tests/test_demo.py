"""``make demo`` runs the real demo: worker processes on SQLite, ending by itself with a summary."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_every_task_through_real_workers_and_ends_by_itself(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"}
    env["TMPDIR"] = str(tmp_path)
    stale = tmp_path / f"conveyor-demo-{getpass.getuser()}"
    stale.mkdir()
    (stale / "demo.db").write_text("the last run's database")
    proc = subprocess.run([sys.executable, "-m", "conveyor.demo"], env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "Summary" in out and "tasks/s with 2 worker processes)" in out
    assert "archived by reason: 5 permanent\n" in out
    assert "exit codes [0, 0]" in out
    # one directory, the same every run, holding this run's database: nothing else is left behind
    assert [p.name for p in tmp_path.iterdir()] == [stale.name]
    url = f"sqlite:///{stale / 'demo.db'}"
    assert f" --url {url} dashboard\n" in out
    assert "then read README.md" in out
    counts = subprocess.run(
        [sys.executable, "-m", "conveyor", "--url", url, "stats", "--json"], env=env, capture_output=True, text=True
    )
    assert counts.returncode == 0, counts.stderr
