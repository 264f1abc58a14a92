"""``bench.sqlite_mixed``: the delayed tasks' and retries' lateness read from the events, and a small run
(in processes of their own: ``bench`` is importable from the repository's root)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


#: Prints ``lateness`` of a delayed task "d" (due at 10.5, started at 10.52) and a task "f" that
#: failed once (the settle made it a retry at 10.3, started again at 10.7).
_LATENESS = """
import json
from bench.sqlite_mixed import lateness
print(json.dumps(lateness([
    ("d", None, "scheduled", 10.0),
    ("f", None, "pending", 10.1),
    ("f", "pending", "active", 10.2),
    ("f", "active", "retry", 10.3),
    ("d", "scheduled", "pending", 10.5),
    ("d", "pending", "active", 10.52),
    ("f", "retry", "pending", 10.6),
    ("f", "pending", "active", 10.7),
])))
"""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    """``python <args>`` from the repository's root, with ``bench`` importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=100, check=False
    )


def test_lateness_counts_from_the_due_time_and_from_the_settle_that_retried() -> None:
    done = _python("-c", _LATENESS)
    assert done.returncode == 0, done.stderr
    delayed, retried = json.loads(done.stdout)
    assert delayed == [pytest.approx(20.0)]
    assert retried == [pytest.approx(400.0)]


@pytest.mark.slow
@pytest.mark.timeout(110)
def test_sqlite_mixed_benchmark_runs_and_traces() -> None:
    done = _python("-m", "bench.sqlite_mixed", "--n", "100", "--passes", "1", "--trace")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"pass 1: this tree: [\d,]+/s, producer [\d.]+ s, last run [+-][\d.]+ s; delayed: p50 ", out), out
    assert "retried: p50 " in out, out
