"""``bench.sqlite_schema`` keeps working against the broker's statements: a line per mode, payload and layout."""

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
def test_each_layout_enqueues_claims_and_settles(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.sqlite_schema", str(tmp_path), "50", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()[1:]
    layouts = ("current", "norowid", "two", "bound", "app")
    expected = [(mode, size, layout) for mode in ("NORMAL", "FULL") for size in ("16B", "2KB") for layout in layouts]
    assert [tuple(line.split()[2:5]) for line in lines] == expected, done.stdout
    number = r"[\d.]+/[\d.]+"
    for line in lines:
        drain = "" if re.search(" (two|bound|app) ", line) else rf"  claim {number}  settle {number}"
        shape = rf"pass 1 \w+ \w+ \w+ +bare {number}  enqueue {number}{drain}  enqueue/bare [\d.]+x/[\d.]+x"
        assert re.fullmatch(shape, line), line
