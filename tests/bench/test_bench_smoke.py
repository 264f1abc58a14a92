"""The benchmark harness keeps working: a smoke run (N=500, Conveyor only) completes and reports figures;
``bench.bench_redis``, ``bench.server_cost``, ``bench.sqlite_sync`` and ``bench.drain_ratio`` run small and
report theirs. It publishes ``conveyor worker`` as a user starts it: the default row gives it nothing but
the broker URL, the tuned row says what it adds, and the ratio to the best peer is the default row's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float, env: dict[str, str] | None = None) -> str:
    """``python -m <args>`` from the repository's root, as ``make bench`` runs it: its output (exit 0)."""
    return run_python("-m", *args, timeout=timeout, env=env)


def run_python(*args: str, timeout: float, env: dict[str, str] | None = None) -> str:
    """``python <args>`` from the repository's root, with ``bench`` importable: its output (exit 0)."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@dataclass(frozen=True)
class SmokeRun:
    """One ``python -m bench --smoke --no-peers`` over every Conveyor backend: its output and directory."""

    out: str
    dir: Path


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """The smoke run the tests below read, made once (~35 s): what each checks is in the one report."""
    out_dir = tmp_path_factory.mktemp("smoke")
    out = run_bench("bench", "--smoke", "--no-peers", "--out", str(out_dir), timeout=140, env={"N": "500"})
    return SmokeRun(out, out_dir)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_smoke_run_writes_a_report_with_measured_figures(smoke_run: SmokeRun) -> None:
    report = (smoke_run.dir / "benchmarks.md").read_text()
    assert "| Conveyor (memory) |" in report
    assert "**Command:** `python -m bench --smoke --no-peers --out " in report, report
    figures = json.loads((smoke_run.dir / "results.json").read_text())["figures"]
    measured = {(f["library"], f["workload"]): f["value"] for f in figures if f["value"] is not None}
    assert measured[("server floor", "round_trip")] > 0
    assert measured[("Conveyor (memory)", "enqueue_single")] > 0
    assert any(library == "Conveyor (sqlite)" and workload == "drain" for library, workload in measured)
    assert measured[("Conveyor (sqlite)", "worker_cpu")] > 0


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_smoke_run_publishes_the_sqlite_floor_and_the_process_curve(smoke_run: SmokeRun) -> None:
    """Issue 42's SQLite sections: the bare commit floor and enqueue beside it per ``synchronous``
    mode, the aims, and 1/2/4 worker processes on one file as commands and as ``-p N``."""
    out = smoke_run.out
    assert "## Floors: SQLite on this run's disk" in out and "| -p 4 |" in out, out  # printed at the end too
    figures = json.loads((smoke_run.dir / "results.json").read_text())["figures"]
    measured = {(f["library"], f["variant"], f["workload"]): f["value"] for f in figures if f["value"] is not None}
    for mode in ("FULL", "NORMAL"):
        assert measured[("sqlite floor", f"synchronous={mode}", "commit")] > 0
        assert measured[("sqlite floor", f"synchronous={mode}", "enqueue_single")] > 0
    shapes = ("1 command", "2 commands", "4 commands", "-p 1", "-p 2", "-p 4")
    for shape in shapes:
        assert measured[("sqlite processes", shape, "drain")] > 0, shape
        assert measured[("sqlite processes", shape, "locked")] == 0, shape
        assert measured[("sqlite processes", shape, "warnings")] == 0, shape
    report = (smoke_run.dir / "benchmarks.md").read_text()
    assert re.search(
        r"^\| FULL \(Conveyor's default\) \| [\d,]+ \| [\d,]+ \| [\d.]+x \| [01] of 1 passes \|$", report, re.M
    )
    assert re.search(r"^\| NORMAL \| [\d,]+ \| [\d,]+ \| [\d.]+x \| [01] of 1 passes \|$", report, re.M), report
    assert "## Conveyor on SQLite as a user starts it (issue 42)" in report, report
    user_row = r"^\| `conveyor worker`, {} \| [\d,.]+ \| [\d,.]+ \| [\d,.]+ \| [\d.]+ \| [\d.]+ \|$"
    assert re.search(user_row.format("SQLite, defaults"), report, re.M), report
    assert re.search(user_row.format(r"Redis, defaults \(same run\)"), report, re.M), report
    assert re.search(r"^\| drain ≥ 0.8x `conveyor worker` on Redis \| [\d.]+x \| [01] of 1 passes \|$", report, re.M)
    assert "| drain ≥ 3x the best `SqliteHuey` consumer | — | not measured |" in report, report  # no peers ran
    for mode in (r"FULL, the default", "NORMAL"):
        enqueue_row = rf"^\| one `enqueue` ≤ 2x a bare commit \({mode}\) \| [\d.]+x \| [01] of 1 passes \|$"
        assert re.search(enqueue_row, report, re.M), report
    assert "| no log line mentions a locked database (curve) | 0 lines | yes |" in report, report
    for shape in shapes:
        assert re.search(
            rf"^\| {shape} \| [\d,]+ \| (reference|[\d.]+x) \| [\d.]+ \| [\d.]+% \(even: \d+%\) \| 0 \| 0 \|$",
            report,
            re.M,
        ), shape


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_repetitions_are_made_in_passes_over_every_library(tmp_path: Path) -> None:
    """Each pass runs every library once, so a figure's runs are spread over the whole run."""
    args = ("bench", "--smoke", "--no-peers", "--reps", "2", "--conveyor", "memory,sqlite", "--curve-shapes", "")
    lines = run_bench(*args, "--out", str(tmp_path), timeout=110, env={"N": "100"}).splitlines()
    passes = [i for i, line in enumerate(lines) if line.startswith("pass ")]
    assert [lines[i] for i in passes] == ["pass 1 of 2", "pass 2 of 2"], lines
    for start, end in zip(passes, [*passes[1:], len(lines)], strict=True):
        assert [line.strip() for line in lines[start:end] if "Conveyor (" in line] == [
            "Conveyor (memory)",
            "Conveyor (sqlite)",
        ], lines
    figures = json.loads((tmp_path / "results.json").read_text())["figures"]
    runs = {(f["library"], f["variant"], f["workload"]): len(f["runs"]) for f in figures if f["runs"]}
    assert runs[("Conveyor (memory)", "default", "enqueue_single")] == 2
    assert runs[("Conveyor (sqlite)", "default", "drain")] == 2
    assert runs[("Conveyor (sqlite)", "default", "worker_rss")] == 1  # read once per run
    keys = [(f["library"], f["variant"], f["workload"]) for f in figures]
    assert len(keys) == len(set(keys))  # one figure per workload, whatever the number of passes


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_redis_benchmark_runs_and_reports_server_time_per_task(tmp_path: Path) -> None:
    small = ["--tasks", "2000", "--single", "200", "--latency-tasks", "40", "--concurrency", "20", "--reps", "2"]
    markdown = tmp_path / "aims.md"
    lines = run_bench("bench.bench_redis", *small, "--markdown", str(markdown), timeout=110).splitlines()
    assert [line for line in lines if line.startswith("run ")] == ["run 1 of 2 done", "run 2 of 2 done"], lines
    server_times = [float(line.split()[4]) for line in lines if line.startswith("server time per task")]
    assert len(server_times) == 3 and all(usec > 0 for usec in server_times), lines
    assert any(line.startswith("drain, Worker.run()") for line in lines), lines
    floor = [line for line in lines if line.startswith("idle PING round trip")]
    assert len(floor) == 1 and "idle-to-running p50 = " in floor[0], lines
    # every aim's line says in how many of the 2 runs it was met
    tally = re.compile(r"over 2 runs [\d.,]+-[\d.,]+, aim met in [012]\b")
    for start in ("single enqueue", "batch enqueue", "drain, one process", "drain, Worker.run()", "idle-to-running"):
        line = next(line for line in lines if line.startswith(start))
        assert tally.search(line), line
    latency = next(line for line in lines if line.startswith("idle-to-running"))
    assert len(tally.findall(latency)) == 2, latency  # p50 and p99
    # the Markdown report: one row per aim, with its tally of the 2 runs, the run's settings in the labels
    report = markdown.read_text()
    aim_rows = re.findall(
        r"^\| (.+?) \| [\d.,]+(?:x|/s| ms) \| .+ to .+ \| [<>]=? [\d.,]+(?:x|/s| ms) \| [012] of 2 \|$", report, re.M
    )
    assert len(aim_rows) == 6, report
    assert "drain, `Worker.run()`: no-op tasks, concurrency 20, one process" in aim_rows, report
    assert "--reps 2" in report and "server time per task: claim + settle" in report, report
    assert re.search(r"^\*\*Machine:\*\* \d+ cores, \S.*\.  $", report, re.M), report  # the host's CPU model
    # the runtime's share of the plain drain, per run (the host's speed cancels out of it)
    runtime = next(line for line in lines if line.startswith("drain, Worker.run()"))
    assert re.search(r"; [\d.]+x the one-process drain of the same run; over 2 runs [\d.]+-[\d.]+\)$", runtime), runtime
    assert "| drain, `Worker.run()`, as a share of the one-process drain of the same run | " in report, report


COST_LINE = re.compile(r"^\s*([\d,]+)  per (.+?)  \(")


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind is not installed")
def test_server_cost_counts_each_phase_on_its_own() -> None:
    out = run_bench("bench.server_cost", "--tasks", "40", "--singles", "10", timeout=230)
    costs = {m.group(2): int(m.group(1).replace(",", "")) for m in map(COST_LINE.match, out.splitlines()) if m}
    assert len(costs) == 18, out
    ping = costs["PING"]
    assert ping > 0
    # every broker call runs a Lua function: several times the work of a PING, per call
    singles = ("one-task enqueue", "one-task claim", "one-outcome settle", "one-outcome settle of a retry due in 5 s")
    for unit in (*singles, "operator's cancel of a scheduled task"):
        assert costs[unit] > 5 * ping, out
    # a batch shares a call's fixed cost among its tasks: less per task than a call of one
    assert costs["task of a batch enqueue"] < costs["one-task enqueue"], out
    assert costs["task of a 500-task claim"] < costs["one-task claim"], out
    assert costs["task of a 100-task claim"] < costs["one-task claim"], out
    assert costs["outcome of a 500-outcome settle"] < costs["one-outcome settle"], out
    # a unique key costs its claim in the namespace's unique-key hash on top of the plain enqueue
    assert costs["one-task enqueue with a unique key"] > costs["one-task enqueue"], out
    assert costs["task of a batch enqueue, each with a unique key"] > costs["task of a batch enqueue"], out
    # a partitioned queue's batch is a task of a batch too: one call's fixed cost shared by many
    assert costs["task of a 500-task enqueue into a queue in 6 partitions"] < costs["one-task enqueue"], out
    # a get is one read-only call: more than a PING, less than a one-task enqueue
    for unit in ("get of a pending task by a generated id", "get of a pending task by a custom id"):
        assert ping < costs[unit] < costs["one-task enqueue"], out


CLUSTER_LINE = re.compile(r"^(\S+)\s+(ping|enqueue 1|enqueue 500|drain)\s.*server CPU\s+[\d.]+ us/task.*\[(.*)\]$")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cluster_cost_reports_every_target_and_phase() -> None:
    out = run_bench(
        "bench.cluster_cost",
        *("--tasks", "500", "--singles", "20", "--reps", "1", "--partitions", "6", "--backlog", "10"),
        *("--one-master", "--namespace-length", "5"),
        timeout=170,
    )
    rows = {(m.group(1), m.group(2)): m.group(3) for m in map(CLUSTER_LINE.match, out.splitlines()) if m}
    targets = ("server", "cluster", "server/p6", "cluster/p6", "cluster1/p6")
    assert set(rows) == {(t, p) for t in targets for p in ("ping", "enqueue 1", "enqueue 500", "drain")}, out
    # a queue in 6 partitions on 3 masters: each master runs a share of its one-task enqueues
    shares = [float(share) for share in rows[("cluster/p6", "enqueue 1")].split(",")]
    assert len(shares) == 3 and min(shares) > 0.2, out


FLUSH_CHECK = """
from bench.server import Placement, Server

with Server(Placement(None, None, 1)) as server:
    client = server.client()
    empty = server.used_memory()
    pipe = client.pipeline(transaction=False)
    for i in range(100_000):
        pipe.hset(f"k{i}", mapping={"a": "x" * 50, "b": "y" * 50})
    pipe.execute()
    filled = server.used_memory() - empty
    server.flush()
    print(filled, server.used_memory() - empty)
    client.close()
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_server_flush_frees_the_memory_before_it_returns() -> None:
    """Memory per task is a ``used_memory`` delta from a flushed server: the flush must be done freeing
    when it returns (Valkey frees a plain FLUSHALL in the background by default)."""
    filled, left = map(int, run_python("-c", FLUSH_CHECK, timeout=50).split())
    assert filled > 10_000_000
    assert left < filled / 20


@pytest.mark.slow
def test_sqlite_sync_benchmark_compares_both_modes(tmp_path: Path) -> None:
    out = run_bench("bench.sqlite_sync", "--tasks", "50", "--reps", "1", "--dir", str(tmp_path), timeout=60)
    for phase in ("enqueue one by one", "Worker.run drain", "drain one per claim"):
        assert re.search(rf"{phase} +NORMAL +[\d,]+ +FULL +[\d,]+ +\(\d+\.\d\dx\)", out), out
    assert not list(tmp_path.iterdir())  # its database files are gone


COMMAND = """
import json
from bench.conveyor_peer import SETTINGS, worker_command
argv, env = worker_command()
print(json.dumps({"argv": argv[1:], "env": env, "settings": SETTINGS}))
"""


def command(variant: str, workload: str = "drain") -> dict[str, object]:
    out = run_python("-c", COMMAND, timeout=30, env={"BENCH_VARIANT": variant, "BENCH_WORKLOAD": workload})
    result: dict[str, object] = json.loads(out)
    return result


def test_the_default_row_is_conveyor_worker_given_nothing_but_the_app() -> None:
    default = command("default")
    assert default["argv"] == ["-m", "conveyor", "worker", "bench.conveyor_peer:app"]
    assert default["env"] == {}


def test_the_tuned_row_says_what_it_adds() -> None:
    tuned = command("tuned")
    argv, env, settings = tuned["argv"], tuned["env"], tuned["settings"]
    assert isinstance(argv, list) and isinstance(env, dict) and isinstance(settings, dict)
    added = argv[4:] + [f"{k}={v}" for k, v in env.items()]
    assert added and all(option in settings["tuned"] for option in added), (added, settings["tuned"])


REPORT = """
import json, sys
from pathlib import Path
from bench.report import write_report

def fig(library, variant, value):
    return {"library": library, "variant": variant, "workload": "drain", "metric": "drain, one worker process",
            "unit": "tasks/s", "runs": [value], "note": "", "higher_is_better": True}

data = {
    "meta": {"date": "d", "n": 1, "reps": 1, "nproc": 2, "cpu": "c", "python": "3", "placement": "p"},
    "settings": {},
    "figures": [fig("Conveyor (redis)", "default", 30000.0), fig("Conveyor (redis)", "tuned", 40000.0),
                fig("Dramatiq", "tuned", 10000.0)],
}
write_report(data, Path(sys.argv[1]))
"""


def test_the_ratio_to_the_best_peer_is_the_default_rows(tmp_path: Path) -> None:
    run_python("-c", REPORT, str(tmp_path / "report.md"), timeout=30)
    text = (tmp_path / "report.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("| drain, one worker process |"))
    assert "30,000 (Conveyor (redis), default)" in line and "| 3.00 |" in line, line
    assert "40,000 (Conveyor (redis), tuned)" in line, line  # the best of any settings, beside it


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_drain_ratio_runs_conveyor_worker_and_reports_its_cpu_per_task() -> None:
    out = run_bench(
        # 5000 tasks: the CPU figure is read in clock ticks (10 ms); 300 drained in one tick read as 0.0 µs
        "bench.drain_ratio",
        "--n",
        "5000",
        "--reps",
        "1",
        "--peers",
        "",
        "--conveyor",
        "default",
        timeout=110,
    )
    rows = re.findall(r"Conveyor \(redis\) default +(\d+)/s +(?:\([\d-]+\) +)?([\d.]+) µs/task", out)
    assert len(rows) == 2, out  # the pass's line and the median's
    assert all(float(rate) > 0 and float(cpu) > 0 for rate, cpu in rows), out
