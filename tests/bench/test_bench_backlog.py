"""``python -m bench.backlog`` keeps working: a tiny run over every backend prints its table and writes its
section into a report, where ``python -m bench`` keeps it. Figures are checked for presence, never for speed.

The section's checks import ``bench`` (the repository's), which pytest's import path would find as
``tests/bench``, so they run as a script of their own: ``backlog_sections.py`` beside this file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python(*args: str, timeout: float) -> str:
    """``python <args>`` from the repository's root, with ``bench`` importable: its output (exit 0)."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


REPORT = "# Benchmarks\n\nintro\n\n## Results\n\nrows\n\n## Notes\n\n1. a note\n\n## Settings\n\n- s\n"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_tiny_backlog_run_measures_every_backend_and_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text(REPORT)
    args = ["--levels", "200,400", "--singles", "10", "--batches", "2", "--batch-size", "10", "--reps", "2"]
    out = _python("-m", "bench.backlog", *args, "--partitions", "3", "--markdown", str(report), timeout=110)
    backends = (
        "Redis, one server",
        "Redis Cluster, 3 masters",
        "Redis Cluster, 3 masters, 3 partitions",
        "SQLite file",
    )
    for backend in backends:
        for queued in ("200", "400"):
            # queued, B/task, enqueue /s (median and range of the 2 passes), CPU µs/task, four latencies (ms)
            rate = r"[\d,]+ \([\d,]+-[\d,]+\)"
            row = rf"^ *{re.escape(backend)} +{queued} +[\d,]+ +{rate} +\d+\.\d( +\d+\.\d\d){{4}}  \S"
            assert re.search(row, out, re.M), (backend, queued, out)
    assert [line for line in out.splitlines() if line.startswith("pass ")] == ["pass 1 of 2", "pass 2 of 2"], out
    text = report.read_text()
    start = text.index("## Backlog: 10k, 100k, 1M tasks\n")
    section = text[start : text.index("## Notes")]
    assert text.index("## Results") < start and text.count("## Backlog") == 1, text
    assert "**Command:** `python -m bench.backlog --levels 200,400 " in section
    assert len(re.findall(r"^\| (Redis|SQLite).* \|$", section, re.M)) == 8, section
    assert section.count("200 → 400 queued: bytes per task ") == 4, section
    assert "- Redis Cluster, 3 masters, 3 partitions: the bytes by master (200: " in section, section
    assert text.replace(section, "") == REPORT  # the rest as it was


@pytest.mark.timeout(60)
def test_the_section_replaces_itself_and_the_main_report_keeps_it() -> None:
    _python(str(Path(__file__).with_name("backlog_sections.py")), timeout=50)  # exits 1 if a check fails
