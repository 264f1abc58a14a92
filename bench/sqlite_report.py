"""The SQLite sections of ``docs/benchmarks.md`` (issue 42): the floor, Conveyor against ``SqliteHuey``
and against itself on Redis, the aims, and the 1/2/4-process curve. Each says what it lacks when a
part of the run did not measure it, rather than leaving it out."""

from __future__ import annotations

from typing import Any

from bench.measure import Figure
from bench.peer_runs import SQLITE_PEER
from bench.report_format import fmt, per_pass, ratio_text
from bench.sqlite_floors import MODES
from bench.sqlite_procs import shape_label
from bench.sqlite_runs import CURVE, FLOOR

__all__ = ["sqlite_floor_section", "sqlite_sections", "sqlite_summary"]

Key = tuple[str, str, str]
SQLITE = "Conveyor (sqlite)"
REDIS = "Conveyor (redis)"
PEERS = (f"{SQLITE_PEER}, 1 thread)", f"{SQLITE_PEER}, 8 threads)")
COLUMNS = ("drain", "worker_cpu", "enqueue_single", "latency_p50", "latency_p99")


def _measured(by_key: dict[Key, Figure], key: Key) -> Figure | None:
    figure = by_key.get(key)
    return figure if figure is not None and figure.value is not None else None


def _enqueue_cost(by_key: dict[Key, Figure], mode: str) -> list[float]:
    """One enqueue's time over one bare commit's, pass by pass (the rates' inverse ratio)."""
    commit = _measured(by_key, (FLOOR, f"synchronous={mode}", "commit"))
    enqueue = _measured(by_key, (FLOOR, f"synchronous={mode}", "enqueue_single"))
    if commit is None or enqueue is None or len(commit.runs) != len(enqueue.runs):
        return []
    return [c / e for c, e in zip(commit.runs, enqueue.runs, strict=True)]


def _met(ratios: list[float], aim: float, below: bool, of: str = "passes") -> str:
    if not ratios:
        return "not measured"
    met = sum(1 for r in ratios if (r <= aim if below else r >= aim))
    return f"{met} of {len(ratios)} {of}"


def sqlite_floor_section(by_key: dict[Key, Figure], default_mode: str | None) -> list[str]:
    lines = [
        "",
        "## Floors: SQLite on this run's disk",
        "",
        "Bare one-row WAL transactions (`BEGIN IMMEDIATE`, one `INSERT`, `COMMIT`) and then one-task",
        "`enqueue` calls of a Conveyor app at the same `synchronous` setting, in one process, on the disk of",
        "the run's SQLite files, in every pass (`bench/sqlite_floors.py`). Issue 42's aim: one `enqueue`",
        "costs at most 2x the bare transaction. The cost ratio is taken pass by pass: median (range).",
        "",
        "| synchronous | bare commits/s | `enqueue` one at a time /s | enqueue / bare commit, time | aim ≤ 2x met in |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    if not any(k[0] == FLOOR for k in by_key):
        return [*lines, "| not measured (SQLite not in this run) | | | | |"]
    for mode in MODES:
        commit = _measured(by_key, (FLOOR, f"synchronous={mode}", "commit"))
        enqueue = _measured(by_key, (FLOOR, f"synchronous={mode}", "enqueue_single"))
        ratios = _enqueue_cost(by_key, mode)
        name = f"{mode} (Conveyor's default)" if mode == default_mode else mode
        lines.append(
            f"| {name} | {fmt(commit.value if commit else None)} | {fmt(enqueue.value if enqueue else None)} "
            f"| {ratio_text(ratios)} | {_met(ratios, 2.0, below=True)} |"
        )
    return lines


def _processes(label: str) -> int:
    """The process count of a shape's label (``-p 4``, ``4 commands``)."""
    return int(label.split()[1] if label.startswith("-p") else label.split()[0])


def _user_table(by_key: dict[Key, Figure]) -> list[str]:
    rows = [
        ("`conveyor worker`, SQLite, defaults", SQLITE),
        ("Huey `SqliteHuey`, consumer with 1 thread", PEERS[0]),
        ("Huey `SqliteHuey`, consumer with 8 threads", PEERS[1]),
        ("`conveyor worker`, Redis, defaults (same run)", REDIS),
    ]
    lines = [
        "| | drain /s | worker CPU µs/task | enqueue 1-by-1 /s | p50 ms at 200/s | p99 ms at 200/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, library in rows:
        cells = [_measured(by_key, (library, "default", workload)) for workload in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(fmt(c.value) if c else "—" for c in cells) + " |")
    return lines


#: How ``bench/sqlite_procs.py`` times the curve.
_CURVE_METHOD = (
    "the workers are started on an empty file and, once every process has registered, the tasks are enqueued"
    " in one transaction; the rate runs from that commit to the last completion, with the CPU of the worker"
    " processes (children included) over that span."
)

#: How the curve's ratios are taken.
_CURVE_RATIO = (
    "Each pass drains with one command, then with each other shape followed by one command again; a"
    " shape's ratio is to the mean of the one-command drains just before and after it (the host's load"
    " moves within a minute), and the one-command row gives the mean of its drains."
)


def _over_one(by_key: dict[Key, Figure], label: str, one: Figure | None) -> list[float]:
    """A shape's drain over one command's, pass by pass: its ``over_one`` runs (each over the one-command
    drains just before and after it), or from a run that has none, over the pass's one-command drain."""
    paired = by_key.get((CURVE, label, "over_one"))
    if paired is not None and paired.runs:
        return list(paired.runs)
    drain = _measured(by_key, (CURVE, label, "drain"))
    return per_pass(drain, [one]) if drain and one else []


def _curve_rows(by_key: dict[Key, Figure]) -> list[str]:
    shapes = sorted({_processes(k[1]) for k in by_key if k[0] == CURVE})
    if not shapes:
        return ["", "Not measured: the run did not include SQLite (`bench/sqlite_procs.py`)."]
    one = _measured(by_key, (CURVE, shape_label("commands", 1), "drain"))
    lines = [
        "",
        f"Measured by `bench/sqlite_procs.py`: {_CURVE_METHOD} {_CURVE_RATIO} Log lines",
        "are summed over the passes.",
        "",
        "| shape | drain /s | over 1 command | worker CPU µs/task | smallest share of the tasks | "
        "log lines mentioning `locked` | log lines at WARNING+ |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in ("commands", "pool"):
        for processes in shapes:
            reference = "reference" if (mode, processes) == ("commands", 1) else "—"
            label = shape_label(mode, processes)
            if (CURVE, label, "drain") not in by_key:
                continue
            drain = _measured(by_key, (CURVE, label, "drain"))
            cpu = _measured(by_key, (CURVE, label, "worker_cpu"))
            share = _measured(by_key, (CURVE, label, "share_min"))
            locked = by_key.get((CURVE, label, "locked"))
            warnings = by_key.get((CURVE, label, "warnings"))
            ratios = _over_one(by_key, label, one) if (mode, processes) != ("commands", 1) else []
            fair = f"{fmt(share.value)}% (even: {100 / processes:.0f}%)" if share else "—"
            lines.append(
                f"| {label} | {fmt(drain.value if drain else None)} | {ratio_text(ratios) if ratios else reference} "
                f"| {fmt(cpu.value if cpu else None)} | {fair} "
                f"| {int(sum(locked.runs)) if locked and locked.runs else '—'} "
                f"| {int(sum(warnings.runs)) if warnings and warnings.runs else '—'} |"
            )
            if drain is None and (note := by_key[(CURVE, label, "drain")].note):
                lines[-1] += f" {note}"
    return lines


def _aims(by_key: dict[Key, Figure], default_mode: str | None) -> list[str]:
    mine = _measured(by_key, (SQLITE, "default", "drain"))
    peers = [f for p in PEERS if (f := _measured(by_key, (p, "default", "drain")))]
    redis = _measured(by_key, (REDIS, "default", "drain"))
    over_peer = per_pass(mine, peers) if mine and peers else []
    over_redis = per_pass(mine, [redis]) if mine and redis else []
    p50 = _measured(by_key, (SQLITE, "default", "latency_p50"))
    p99 = _measured(by_key, (SQLITE, "default", "latency_p99"))
    one = _measured(by_key, (CURVE, shape_label("commands", 1), "drain"))
    several = [
        ratio
        for key in by_key
        if key[0] == CURVE and key[2] == "drain" and _processes(key[1]) > 1
        for ratio in _over_one(by_key, key[1], one)
    ]
    locked = sum(sum(f.runs) for k, f in by_key.items() if k[0] == CURVE and k[2] == "locked")

    commit = _measured(by_key, (FLOOR, f"synchronous={default_mode}", "commit"))
    # the latency starts before the producer's enqueue, whose commit syncs (FULL): a bare commit is its floor
    synced = f"; a bare commit: {1000 / commit.value:.2f} ms" if commit and commit.value else ""

    def latency(figure: Figure | None) -> str:
        return ", ".join(f"{v:.2f}" for v in figure.runs) + " ms" + synced if figure else "—"

    def under(figure: Figure | None, aim: float) -> str:
        return _met([v / aim for v in figure.runs] if figure else [], 1.0, below=True)

    return [
        "",
        "| aim (issue 42) | measured, median (range of the passes) | met in |",
        "| --- | --- | --- |",
        f"| drain ≥ 3x the best `SqliteHuey` consumer | {ratio_text(over_peer)} | {_met(over_peer, 3.0, False)} |",
        f"| drain ≥ 0.8x `conveyor worker` on Redis | {ratio_text(over_redis)} | {_met(over_redis, 0.8, False)} |",
        f"| idle-to-running p50 at 200/s < 1 ms | {latency(p50)} | {under(p50, 1.0)} |",
        f"| idle-to-running p99 at 200/s < 5 ms | {latency(p99)} | {under(p99, 5.0)} |",
        *(
            f"| one `enqueue` ≤ 2x a bare commit ({mode}{', the default' if mode == default_mode else ''}) "
            f"| {ratio_text(cost)} | {_met(cost, 2.0, True)} |"
            for mode in MODES
            if (cost := _enqueue_cost(by_key, mode)) or mode == default_mode
        ),
        f"| 2 and 4 processes drain ≥ 1 command (every shape, every pass) | {ratio_text(several)} "
        f"| {_met(several, 1.0, False, 'drains (shapes by passes)')} |",
        f"| no log line mentions a locked database (curve) | {int(locked)} lines | "
        + ("yes" if any(k[0] == CURVE for k in by_key) and not locked else "—" if not locked else "no")
        + " |",
    ]


def sqlite_sections(figures: list[Figure], by_key: dict[Key, Figure], default_mode: str | None) -> list[str]:
    """Conveyor on SQLite as a user starts it, its aims and the process curve (empty without SQLite)."""
    if _measured(by_key, (SQLITE, "default", "drain")) is None and not any(k[0] == CURVE for k in by_key):
        return []
    return [
        "",
        "## Conveyor on SQLite as a user starts it (issue 42)",
        "",
        "`conveyor worker bench.conveyor_peer:app` given nothing but the broker URL (a file in a temporary",
        f"directory of the VM's disk; `synchronous={default_mode or '?'}`, the default), pinned with the other",
        "clients, beside Huey's `SqliteHuey` (default settings, its consumer with 1 and with 8 threads, a file",
        "of the same directory) and Conveyor's default worker on Redis, all in this run. Drain: N no-op tasks",
        "queued first (SqliteHuey: N/2), from the first task's start to the last one's end; CPU: the worker's",
        "process tree over the drain; enqueue: one process, one call per task; latency: an idle worker, 600",
        "tasks at a paced 200/s, the handler's start minus the producer's clock before its `enqueue` (under",
        "FULL that includes the enqueue's commit and its sync; the claim commits without one; the producer",
        "and the worker share one core). An idle Conveyor worker on SQLite is woken by the FIFO beside the",
        "file (`docs/architecture.md`), not by its poll interval. `python -m bench.sqlite_latency` runs this",
        "latency alone, beside the disk's bare commit at the same pace; `python -m bench.sqlite_mixed` the",
        "mixed row, with `--trace` how late each delayed task and retry started.",
        "",
        *_user_table(by_key),
        *_aims(by_key, default_mode),
        "",
        "### SQLite: 1, 2 and 4 worker processes on one file",
        "",
        "`conveyor worker` with default settings, as N separate commands and as one command with `-p N`",
        "(a supervisor and N children), on a fresh file each, 3N no-op tasks per drain (the shapes' order",
        "starts one further on each pass). These processes may",
        "use both cores (unpinned: on one core N processes could not add up), so compare the shapes with",
        "each other, not with the pinned drain above.",
        *_curve_rows(by_key),
    ]


def sqlite_summary(data: dict[str, Any]) -> list[str]:
    """What ``python -m bench`` prints at its end: the SQLite floor, the aims and the curve."""
    figures = [Figure.from_json(f) for f in data["figures"]]
    by_key = {(f.library, f.variant, f.workload): f for f in figures}
    default_mode = data.get("settings", {}).get(FLOOR, {}).get("default")
    if not any(k[0] == FLOOR for k in by_key):
        return []
    return [*sqlite_floor_section(by_key, default_mode), *sqlite_sections(figures, by_key, default_mode)]
