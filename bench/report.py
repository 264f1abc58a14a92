"""Writes ``docs/benchmarks.md`` from the saved figures (``results.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.backlog_report import HEADING, section_of
from bench.measure import Figure
from bench.peer_runs import SQLITE_PEER
from bench.report_format import APART, best, cell, fmt
from bench.sqlite_report import sqlite_floor_section, sqlite_sections
from bench.sqlite_runs import FLOOR

__all__ = ["write_report"]

COLUMNS = [
    ("enqueue_single", "enqueue 1-by-1 /s"),
    ("enqueue_bulk", "enqueue bulk /s"),
    ("drain", "drain /s"),
    ("worker_cpu", "CPU µs/task"),
    ("latency_p50", "p50 ms"),
    ("latency_p99", "p99 ms"),
    ("mixed", "mixed /s"),
    ("io", "1 ms I/O /s"),
    ("server_bytes", "server B/task"),
    ("worker_rss", "worker RSS MB"),
]
RATIO_WORKLOADS = ["enqueue_single", "enqueue_bulk", "drain", "latency_p50", "latency_p99", "mixed", "io"]


def _rows(figures: list[Figure]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for figure in figures:
        key = (figure.library, figure.variant)
        if figure.library not in APART and key not in seen:
            seen.append(key)
    return seen


def _merge_warning(meta: dict[str, Any], figures: list[Figure]) -> list[str]:
    """When rows come from several runs, say how loaded the machine was in each (the PING floor)."""
    merged = meta.get("merged_runs") or []
    if not merged:
        return []
    now = next((f.value for f in figures if f.workload == "round_trip"), None)
    runs = [f"{meta['date']}: {fmt(now)}"] + [f"{m['date']}: {fmt(m['round_trips'])}" for m in merged]
    return [
        "",
        "**Caution — not one run.** Rows were measured in different runs, and the machine's load differed:",
        f"PING round trips/s from one Python process were {'; '.join(runs)}. Ratios across rows of",
        "different runs are not side by side; rerun `make bench` in one go before quoting them.",
    ]


def _sqlite_peer_section(figures: list[Figure], by_key: dict[tuple[str, str, str], Figure]) -> list[str]:
    """Conveyor on SQLite against the embedded peers (Huey's ``SqliteHuey``), workload by workload."""
    if not any(f.library.startswith(SQLITE_PEER) and f.value is not None for f in figures):
        return []
    lines = [
        "",
        "## Conveyor on SQLite against the best SQLite peer",
        "",
        "Conveyor on SQLite as a user starts it (`conveyor worker`, default settings) over the best of Huey's",
        "`SqliteHuey` with a 1-thread and an 8-thread consumer, both on a file of the same directory.",
        "",
        "| workload | Conveyor (sqlite), default | best SQLite peer | ratio |",
        "| --- | --- | --- | ---: |",
    ]
    for workload in RATIO_WORKLOADS:
        mine = by_key.get(("Conveyor (sqlite)", "default", workload))
        mine = mine if mine is not None and mine.value is not None else None
        theirs = best(figures, workload, SQLITE_PEER)
        either = mine or theirs
        metric = either.metric if either is not None else workload
        ratio = f"{(mine.value or 0) / theirs.value:.2f}" if mine and theirs and theirs.value else "—"
        lines.append(f"| {metric} | {cell(mine, 'not available')} | {cell(theirs, 'not measured')} | {ratio} |")
    return lines


def write_report(data: dict[str, Any], path: Path) -> None:
    meta = data["meta"]
    figures = [Figure.from_json(f) for f in data["figures"]]
    by_key = {(f.library, f.variant, f.workload): f for f in figures}
    notes: list[str] = []
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench`); do not edit by hand. Same machine, same private server,",
        "one run. Every figure is the median of its repetitions; see *Method* below.",
        "",
        f"**Run:** {meta['date']}, N={meta['n']}, {meta['reps']} repetition(s)"
        + (" — **smoke run, not representative**" if meta.get("smoke") else "")
        + f", {meta.get('duration_s', '?')} s.  ",
        *([f"**Command:** `{meta['command']}`.  "] if meta.get("command") else []),
        f"**Machine:** {meta['nproc']} cores, {meta['cpu']}, Python {meta['python']}.  ",
        f"**Server:** {meta.get('server', '?')}.  ",
        f"**Placement:** {meta['placement']}.  ",
        *(
            [f"**Peers:** only {meta['peers_only']} (`--peers`); a plain `make bench` runs every peer.  "]
            if meta.get("peers_only")
            else []
        ),
        *(
            [f"**Merged:** rows not re-measured come from the run(s) of {meta['peers_from']} (same harness).  "]
            if meta.get("peers_from")
            else []
        ),
        "The machine is shared with other engineers' test runs: absolute figures move between runs, so read",
        "medians and ratios, not single numbers.",
        *_merge_warning(meta, figures),
        "",
        "## Floors: the server from one Python process",
        "",
        "| floor | ops/s |",
        "| --- | ---: |",
    ]
    lines += [f"| {f.metric} | {fmt(f.value)} |" for f in figures if f.library == "server floor"]
    default_mode = data.get("settings", {}).get(FLOOR, {}).get("default")
    lines += sqlite_floor_section(by_key, default_mode)
    lines += ["", "## Results", "", "| library | settings | " + " | ".join(c for _, c in COLUMNS) + " |"]
    lines.append("| --- | --- |" + " ---: |" * len(COLUMNS))
    for library, variant in _rows(figures):
        cells = []
        for workload, _ in COLUMNS:
            figure = by_key.get((library, variant, workload))
            if figure is None:
                cells.append("")
                continue
            text = fmt(figure.value)
            if figure.note:
                notes.append(f"{library} [{variant}], {figure.metric}: {figure.note}")
                text += f" [{len(notes)}]"
            cells.append(text)
        lines.append(f"| {library} | {variant} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Conveyor against the best peer",
        "",
        "Conveyor on Redis as a user starts it (`conveyor worker`, default settings; same server as the peers)",
        "over the best peer (any settings); for rates above 1 means Conveyor is faster, for latency below 1",
        "means Conveyor is faster. The last column is Conveyor's best figure with any settings on any backend",
        "(memory and SQLite need no server round trips; the Settings section says what each variant changes).",
        "",
        "| workload | Conveyor (redis), default | best peer | ratio | best Conveyor, any settings or backend |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for workload in RATIO_WORKLOADS:
        mine = by_key.get(("Conveyor (redis)", "default", workload))
        mine = mine if mine is not None and mine.value is not None else None
        theirs = best(figures, workload, None)
        anywhere = best(figures, workload, "Conveyor")
        either = mine or theirs or anywhere
        metric = either.metric if either is not None else workload
        ratio = f"{(mine.value or 0) / theirs.value:.2f}" if mine and theirs and theirs.value else "—"
        lines.append(
            f"| {metric} | {cell(mine, 'not available')} | {cell(theirs, 'not measured')} | {ratio} "
            f"| {cell(anywhere, 'not available')} |"
        )
    lines += sqlite_sections(figures, by_key, default_mode)
    lines += _sqlite_peer_section(figures, by_key)
    for heading in KEPT:  # sections of benches run apart
        kept = section_of(path.read_text(), heading) if path.exists() else None
        if kept:
            lines += ["", kept.rstrip("\n")]
    if notes:
        lines += ["", "## Notes", ""] + [f"{i}. {note}" for i, note in enumerate(notes, 1)]
    lines += ["", "## Settings", ""]
    for library, variants in data.get("settings", {}).items():
        if library in APART:  # the floor's entry is the broker's default mode, given in its section
            continue
        for variant, text in variants.items():
            lines.append(f"- **{library}** [{variant}]: {text}")
    versions = meta.get("versions")
    lines += ["", "## Versions", ""]
    if versions:
        lines.append(", ".join(f"{name} {version}" for name, version in sorted(versions.items())))
        lines.append("(pinned in `bench/peers/requirements.txt`, installed into `bench/.venv-peers`).")
    else:
        lines.append("Peers not run.")
    lines += ["", _METHOD]
    path.write_text("\n".join(lines) + "\n")


#: Headings of the sections other benches write, kept as they are: ``bench.backlog``'s, and the
#: figures of ``bench.cluster_cost`` (written by hand from its output).
KEPT = (HEADING, "## Redis Cluster: one queue over three masters")

_METHOD = """## Method

- One private server (`bench/server.py`) on a free 127.0.0.1 port, persistence off, pinned with `taskset`
  to one core; the harness and every producer and worker it starts are pinned to the other core. A round
  trip costs far less when client and server share a core, which reorders libraries, so this is fixed.
- Repetitions are interleaved: the run makes one pass over every library per repetition (Conveyor's
  backends, then each peer), and a figure is the median of its passes. This shared machine's speed drifts
  over a run of ~45 minutes; running one library's repetitions after another's compared them at
  different speeds. Worker RSS is read once, in the first pass.
- Each peer runs in its own subprocesses from `bench/.venv-peers`, given the server URL: one producer
  process, one worker process (the library's own worker; Dramatiq's `Worker` in one process, taskiq's
  `--workers 1`, Celery's pool children count as that worker). The store is flushed between runs.
- **Conveyor** on SQLite and Redis is driven exactly like a peer (`bench/conveyor_peer.py` through the same
  driver: a producer process and a worker process). The worker is `conveyor worker bench.conveyor_peer:app`
  as a user starts it: the `default` row gives it nothing but the broker URL (every `WorkerConfig` default,
  `--log-level info`); the `tuned` row's settings list what it adds.
  The memory broker cannot be shared between processes, so it is measured in one process
  (`bench/conveyor_runs.py`): `steppable` is `Worker.run_until_idle()`, `batch loop` is
  `claim(limit=64)` + one `settle` per batch without threads; latency and I/O do not apply to it.
  Conveyor's enqueue figures come from one process calling `task.enqueue` N times, then
  `enqueue_many` in chunks of 10,000.
- **enqueue**: N no-op tasks from one process, one call each; bulk where the library has an API for it
  (RQ `enqueue_many`, Conveyor `enqueue_many`). **server B/task**: `INFO memory` `used_memory` delta from a
  server emptied by `FLUSHALL SYNC`, over the tasks enqueued (Conveyor: the one-by-one and the bulk ones).
- **drain**: N no-op tasks queued first, then one worker process started; rate from the first task's start
  to the last task's end, measured inside the worker (`bench/recorder.py`), so start-up is excluded.
  Slow peers run a fraction of N (RQ 0.15, Celery 0.25, arq/Dramatiq/taskiq/SAQ 0.5): the figures are rates.
- **CPU µs/task**: user + system CPU of the worker's process tree (`/proc`, in 10 ms ticks) from the
  moment its first task ran to the moment its last one had, over the tasks drained.
- **latency**: an idle, warmed-up worker; 600 tasks enqueued at a paced 200/s each carrying `time.time()`;
  latency is the handler's start minus that stamp (both on the same machine clock).
- **mixed**: N/4 tasks into a running worker: 10% fail always with 2 retries and no backoff (3 executions),
  10% are delayed 0.5 s, priorities 0-9 where the library has per-task priorities. Rate is tasks over the
  time from the first enqueue to the last execution. Delays and scheduler poll intervals (RQ, Huey: 1 s)
  weigh on it: compare libraries, not against the drain figures.
- **1 ms I/O**: N/4 tasks sleeping 1 ms (`asyncio.sleep` for async libraries) with 100 concurrent tasks
  where the library allows it.
- **worker RSS**: resident memory of the worker process tree after draining up to 100k no-op tasks
  (fewer for slow peers; the count is noted).
- `python -m bench.drain_ratio --n 20000 --reps 3` checks the drain ratio alone in minutes: the same
  placement and harness, only the drain, the default and tuned `conveyor worker` against Dramatiq and Huey
  (their default and tuned settings and issue 32's: Dramatiq 8 threads with prefetch 100, Huey 8 threads),
  with the worker's CPU per task, and Conveyor's ratio to the best peer of each pass. With
  `--backends redis,sqlite` it also runs Conveyor on SQLite against Huey's `SqliteHuey` (1 and 8 consumer
  threads) and prints, pass by pass, Conveyor SQLite's ratio to the best of them and to Conveyor Redis.
- **SQLite peers**: Huey's `SqliteHuey` on a file beside Conveyor's (`bench/peers/huey_sqlite_peer.py`),
  default settings, its consumer with 1 and with 8 threads, half of N; no server bytes (no server).
- **SQLite floor** (`bench/sqlite_floors.py`, every pass): bare one-row WAL transactions and then
  one-task `enqueue` calls at `synchronous=FULL` and `NORMAL`, 2,000 each, in one process, in the
  directory of the run's SQLite files (the VM's ext4 disk, where a sync is real).
- **SQLite processes** (`bench/sqlite_procs.py`, every pass): 1, 2 and 4 default `conveyor worker`
  processes on one file, as separate commands and as `-p N`, unpinned; N tasks enqueued once all registered.
- The backlog curve (issue 33: bytes per task, enqueue rate and claim latency at 10k, 100k and 1M
  queued, on one server, a 3-master cluster and a SQLite file) is measured apart by
  `python -m bench.backlog` (`make bench-backlog`; `make bench` runs it after this report), which
  writes its own section; this report keeps it.
- The Redis broker's own aims (issue 4) are measured apart: `docs/redis-aims.md`, written by
  `python -m bench.bench_redis --tasks 50000 --reps 5 --markdown docs/redis-aims.md` (every figure in
  five runs; its median, range, and in how many runs it met its aim).
"""
