"""The embedded peers of Conveyor's SQLite broker (issue 42): Huey's ``SqliteHuey`` with a 1-thread and an
8-thread consumer run beside ``conveyor worker`` on SQLite, in ``python -m bench.drain_ratio`` (with the
ratios to the best of them and to Conveyor on Redis) and in ``make bench`` (rows and their own section)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RATE = r"([\d.]+)/s +[\d.]+ µs/task"


def run_python(*args: str, timeout: float, tmp: Path | None = None) -> str:
    """``python <args>`` from the repository's root, with ``bench`` importable (and its temporary
    files in ``tmp`` if given): its output (exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"TMPDIR": str(tmp)} if tmp is not None else {})}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run_bench(*args: str, timeout: float, tmp: Path | None = None) -> str:
    return run_python("-m", *args, timeout=timeout, tmp=tmp)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_drain_ratio_compares_conveyor_on_sqlite_with_sqlitehuey_and_with_redis() -> None:
    args = ("--n", "400", "--reps", "1", "--conveyor", "default", "--backends", "redis,sqlite")
    out = run_bench(
        "bench.drain_ratio", *args, "--peers", "huey,huey_sqlite", "--peer-variants", "default", timeout=110
    )
    rates = {
        label: float(m.group(1))
        for label in (
            "Conveyor (redis) default",
            "Conveyor (sqlite) default",
            "Huey default",
            "Huey 8 threads",
            "Huey (SqliteHuey, 1 thread) default",
            "Huey (SqliteHuey, 8 threads) default",
        )
        if (m := re.search(rf"^  {re.escape(label)} +{RATE}$", out, re.M))
    }
    assert len(rates) == 6 and all(rate > 0 for rate in rates.values()), out
    assert "SqliteHuey" not in "".join(re.findall(r"^.*tuned.*$", out, re.M)), out  # default settings only

    def ratio(row: str, against: str) -> float:
        found = re.search(rf"^  {re.escape(row)}: ([\d.]+)x {re.escape(against)}$", out, re.M)
        assert found, (row, against, out)
        return float(found.group(1))

    # each backend's Conveyor row against its own backend's peers, then SQLite against Redis
    sqlite_peer = max(rates["Huey (SqliteHuey, 1 thread) default"], rates["Huey (SqliteHuey, 8 threads) default"])
    got = ratio("Conveyor (sqlite) default", "the best SQLite peer of this pass")
    assert got == pytest.approx(rates["Conveyor (sqlite) default"] / sqlite_peer, rel=0.01, abs=0.01)
    redis_peer = max(rates["Huey default"], rates["Huey 8 threads"])
    got = ratio("Conveyor (redis) default", "the best peer of this pass")
    assert got == pytest.approx(rates["Conveyor (redis) default"] / redis_peer, rel=0.01, abs=0.01)
    got = ratio("Conveyor (sqlite) default", "Conveyor (redis) default of this pass")
    expected = rates["Conveyor (sqlite) default"] / rates["Conveyor (redis) default"]
    assert got == pytest.approx(expected, rel=0.01, abs=0.01)
    assert ratio("Conveyor (sqlite) default", "the best SQLite peer, pass by pass") > 0, out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_drain_ratio_on_sqlite_alone_runs_only_the_sqlite_peers(tmp_path: Path) -> None:
    args = ("--n", "300", "--reps", "1", "--conveyor", "default", "--backends", "sqlite")
    out = run_bench("bench.drain_ratio", *args, timeout=110, tmp=tmp_path)  # default --peers: dramatiq,huey,huey_sqlite
    assert list(tmp_path.glob("conveyor-*")) == []  # its SQLite files' directory removed on the way out
    labels = [label for label, _ in re.findall(rf"^  (.+?) +{RATE}$", out, re.M)]
    assert labels == [
        "Conveyor (sqlite) default",
        "Huey (SqliteHuey, 1 thread) default",
        "Huey (SqliteHuey, 8 threads) default",
    ], out
    assert re.search(r"^  Conveyor \(sqlite\) default: [\d.]+x the best SQLite peer of this pass$", out, re.M), out
    assert "Conveyor (redis)" not in out, out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_make_bench_publishes_the_sqlite_peer_rows(tmp_path: Path) -> None:
    # a smoke run naming a peer runs it: the smallest sizes, one pass, no process curve
    args = ("--smoke", "--n", "200", "--peers", "huey_sqlite", "--conveyor", "sqlite", "--curve-shapes", "")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run_bench("bench", *args, "--out", str(tmp_path), timeout=110, tmp=tmp)
    assert list(tmp.glob("conveyor-*")) == []  # its SQLite files' directory removed on the way out
    figures = json.loads((tmp_path / "results.json").read_text())["figures"]
    measured = {(f["library"], f["variant"], f["workload"]) for f in figures if f["value"] is not None}
    for threads in ("1 thread", "8 threads"):
        library = f"Huey (SqliteHuey, {threads})"
        for workload in ("enqueue_single", "drain", "latency_p50", "io"):
            assert (library, "default", workload) in measured, (library, workload)
        assert not any(f["library"] == library and f["variant"] == "tuned" for f in figures)
        assert not any(f["library"] == library and f["workload"] == "server_bytes" for f in figures)
    report = (tmp_path / "benchmarks.md").read_text()
    assert "| Huey (SqliteHuey, 1 thread) | default |" in report, report
    assert "| Huey (SqliteHuey, 8 threads) | default |" in report, report
    line = next(line for line in report.splitlines() if line.startswith("| drain, one worker process |"))
    assert "| drain, one worker process | not available | not measured |" in line, line  # no server peer ran
    assert "## Conveyor on SQLite against the best SQLite peer" in report, report


REPORT = """
import sys
from pathlib import Path
from bench.report import write_report

def fig(library, variant, value):
    return {"library": library, "variant": variant, "workload": "drain", "metric": "drain, one worker process",
            "unit": "tasks/s", "runs": [value], "note": "", "higher_is_better": True}

data = {
    "meta": {"date": "d", "n": 1, "reps": 1, "nproc": 2, "cpu": "c", "python": "3", "placement": "p"},
    "settings": {},
    "figures": [fig("Conveyor (redis)", "default", 30000.0), fig("Conveyor (sqlite)", "default", 12000.0),
                fig("Huey", "default", 10000.0), fig("Huey (SqliteHuey, 1 thread)", "default", 3000.0),
                fig("Huey (SqliteHuey, 8 threads)", "default", 4000.0)],
}
write_report(data, Path(sys.argv[1]))
"""


def test_the_report_compares_sqlite_with_the_sqlite_peers_and_redis_with_the_server_peers(tmp_path: Path) -> None:
    run_python("-c", REPORT, str(tmp_path / "report.md"), timeout=30)
    text = (tmp_path / "report.md").read_text()
    drains = [line for line in text.splitlines() if line.startswith("| drain, one worker process |")]
    assert len(drains) == 2, text
    # on Redis: the peers on the server only (Huey on Redis), not the SQLite ones
    assert "10,000 (Huey, default)" in drains[0] and "| 3.00 |" in drains[0], drains[0]
    # on SQLite: the best SqliteHuey consumer
    assert "12,000 (Conveyor (sqlite), default)" in drains[1], drains[1]
    assert "4,000 (Huey (SqliteHuey, 8 threads), default)" in drains[1] and "| 3.00 |" in drains[1], drains[1]
