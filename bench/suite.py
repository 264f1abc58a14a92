"""Runs every workload on Conveyor and on the peers, collecting :class:`Figure` s.

Each figure is the median of ``reps`` runs, made in ``reps`` passes over every library (one run of
each workload per pass), not one library's runs after another's. Sizes: ``n`` no-op tasks for enqueue
and drain (times each peer's ``scale``), ``n // 4`` for the mixed and I/O workloads, a paced 200
tasks/s for latency, ``Plan.rss_tasks`` for the worker RSS figure (``min(100_000, 5 n)``; smoke: the
drain's own N; read once per run). A figure that cannot be measured carries a note saying why
instead of a value, and the run goes on.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import Figure
from bench.peer_runs import Peer, PeerRunner
from bench.procs import run_json
from bench.server import Server
from bench.sqlite_runs import sqlite_curve, sqlite_floors

__all__ = ["Plan", "Suite"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Plan:
    n: int
    reps: int
    latency_n: int
    time_cap: float
    peers: list[Peer] = field(default_factory=list)
    conveyor_variants: tuple[str, ...] = ("default", "tuned")
    rss_tasks: int = 100_000  # worker RSS is read after draining this many (times the peer's scale)
    conveyor_backends: tuple[str, ...] = ("memory", "sqlite", "redis")
    floor_commits: int = 2000  # bare SQLite transactions (and one-task enqueues) per mode and pass
    curve_shapes: tuple[int, ...] = (1, 2, 4)  # worker processes on one SQLite file


def _fig(library: str, variant: str, workload: str) -> Figure:
    metric, unit, higher = {
        "enqueue_single": ("enqueue, one at a time", "tasks/s", True),
        "enqueue_bulk": ("enqueue, bulk", "tasks/s", True),
        "drain": ("drain, one worker process", "tasks/s", True),
        "latency_p50": ("idle-to-running p50 at 200/s", "ms", False),
        "latency_p99": ("idle-to-running p99 at 200/s", "ms", False),
        "mixed": ("mixed workload", "tasks/s", True),
        "io": ("1 ms sleeps, concurrency 100", "tasks/s", True),
        "server_bytes": ("server bytes per queued task", "bytes", False),
        "worker_rss": ("worker RSS after draining", "MB", False),
        "worker_cpu": ("worker CPU per task, drain", "µs", False),
        "commit": ("bare one-row WAL commits", "/s", True),
        "share_min": ("smallest process's share of the tasks", "%", True),
        "locked": ("log lines mentioning a locked database", "lines", False),
        "warnings": ("log lines at WARNING or above", "lines", False),
        "over_one": ("drain over the one-command drains beside it", "x", True),
    }[workload]
    return Figure(library, variant, workload, metric, unit, higher_is_better=higher)


class Suite:
    def __init__(self, server: Server, plan: Plan, log_dir: Path, say: Callable[[str], None]) -> None:
        self.server = server
        self.plan = plan
        self.log_dir = log_dir
        self.say = say
        self.figures: list[Figure] = []
        self._by_key: dict[tuple[str, str, str], Figure] = {}
        self.settings: dict[str, dict[str, str]] = {}
        self.started = time.monotonic()

    def fig(self, library: str, variant: str, workload: str) -> Figure:
        """The figure of ``workload`` for ``library`` (``variant``): made on first use, then the same one,
        so each pass of the run (see :meth:`run_pass`) adds its value to it."""
        key = (library, variant, workload)
        figure = self._by_key.get(key)
        if figure is None:
            figure = self._by_key[key] = _fig(library, variant, workload)
            self.figures.append(figure)
        return figure

    def run_pass(self, sqlite_dir: Path, python: Path | None) -> None:
        """One repetition of every workload of every library: Conveyor, then the peers. A run makes
        ``Plan.reps`` passes, so each library's repetitions are spread over the whole run and a slow
        phase of this shared machine weighs on every library alike (run one library's repetitions
        after another's and a 45-minute run compares them at different speeds)."""
        if "sqlite" in self.plan.conveyor_backends:
            self.say("  SQLite floors")
            sqlite_floors(self, sqlite_dir)
        self.say("conveyor")
        self.conveyor(sqlite_dir)
        if "sqlite" in self.plan.conveyor_backends and self.plan.curve_shapes:
            self.say("  SQLite worker processes")
            sqlite_curve(self, sqlite_dir)
        if python is not None:
            self.say("peers")
            self.peers(python)

    def over_time(self) -> bool:
        return time.monotonic() - self.started > self.plan.time_cap

    def once(self, figures: list[Figure], once: Callable[[], None]) -> None:
        """Run ``once`` (this pass's repetition); on error, note it on the figures that got no value."""
        try:
            once()
        except Exception as exc:
            for figure in figures:
                if not figure.runs:
                    figure.note = f"failed: {str(exc)[:160]}"
            self.say(f"    ! {figures[0].library} {figures[0].workload}: {exc}")

    # -- Conveyor ------------------------------------------------------------------------------------

    def conveyor(self, sqlite_dir: Path) -> None:
        for backend in self.plan.conveyor_backends:
            label = f"Conveyor ({backend})"
            url = {"memory": "memory://", "sqlite": f"sqlite:///{sqlite_dir / 'bench.db'}"}.get(
                backend, self.server.url
            )
            self.say(f"  {label}")
            self._conveyor_backend(label, backend, url)

    def run_json(self, cmd: list[str], timeout: float) -> dict[str, Any]:
        """Run a ``python`` command of the harness's (``bench`` importable) and parse its JSON line."""
        return run_json([_python(), *cmd], _env(), timeout)

    def _inproc(self, url: str, workload: str, n: int) -> dict[str, Any]:
        if url.startswith("sqlite:///"):
            for suffix in ("", "-wal", "-shm"):
                Path(url.removeprefix("sqlite://") + suffix).unlink(missing_ok=True)
        self.server.flush()
        cmd = [_python(), "-m", "bench.conveyor_runs", url, workload, str(n)]
        return run_json(cmd, _env(), 900)

    def _conveyor_backend(self, label: str, backend: str, url: str) -> None:
        plan = self.plan
        single, bulk = self.fig(label, "default", "enqueue_single"), self.fig(label, "default", "enqueue_bulk")
        server_bytes = self.fig(label, "default", "server_bytes") if backend == "redis" else None

        def enqueue() -> None:
            self.server.flush()
            before = self.server.used_memory()
            result = self._inproc(url, "enqueue", plan.n)
            single.runs.append(result["single"])
            bulk.runs.append(result["bulk"])
            if server_bytes is not None:
                server_bytes.runs.append((self.server.used_memory() - before) / (2 * plan.n))

        self.once([single, bulk], enqueue)
        if backend != "memory":
            from bench.conveyor_peer import SETTINGS

            peer = Peer(label, "conveyor", (("BENCH_URL", url),))
            for variant in self.plan.conveyor_variants:
                runner = PeerRunner(Path(_python()), self.server, peer, variant, self.log_dir)
                runner.info = {"bulk": True, "mixed": None}
                self.settings.setdefault(label, {})[variant] = SETTINGS[variant]
                self._peer_workloads(
                    runner, label, variant, None, None, with_rss=variant == "default", with_enqueue=False
                )
            return
        # the in-process memory broker: drain in one process, steppable
        for variant, mode in (("steppable", "steppable"), ("batch loop", "batch")):
            drain = self.fig(label, variant, "drain")

            def once(figure: Figure = drain, workload: str = mode) -> None:
                figure.runs.append(self._inproc(url, workload, plan.n)["rate"])

            self.once([drain], once)
        mixed = self.fig(label, "steppable", "mixed")
        self.once([mixed], lambda: mixed.runs.append(self._inproc(url, "mixed", plan.n // 4)["rate"]))
        rss = self.fig(label, "batch loop", "worker_rss")
        n_mem = plan.rss_tasks
        if not rss.runs:  # once per run
            self.once([rss], lambda: rss.runs.append(self._inproc(url, "batch", n_mem)["rss_mb"]))
        rss.note = f"after {n_mem} tasks; producer and worker in one process"
        for workload in ("latency_p50", "latency_p99", "io"):
            figure = self.fig(label, "default", workload)
            figure.note = "not available: in-process broker: no separate worker process"
        self.settings[label] = {
            "steppable": "Worker.run_until_idle(): one claim and one settle per task",
            "batch loop": "claim(limit=64), run each, one settle per batch (the runtime's shape, no threads)",
        }

    # -- peers ---------------------------------------------------------------------------------------

    def peers(self, python: Path) -> None:
        for peer in self.plan.peers:
            for variant in peer.variants:
                if self.over_time():
                    figure = self.fig(peer.label, variant, "drain")
                    if not figure.runs:
                        figure.note = "skipped: the run's time cap was reached"
                    continue
                self.say(f"  {peer.label} [{variant}]")
                runner = PeerRunner(python, self.server, peer, variant, self.log_dir)
                try:
                    info = runner.load_info()
                except Exception as exc:
                    figure = self.fig(peer.label, variant, "drain")
                    if not figure.runs:
                        figure.note = f"failed to load: {exc}"
                    continue
                self.settings.setdefault(peer.label, {})[variant] = info["settings"][variant]
                self._peer_workloads(
                    runner, peer.label, variant, info.get("mixed"), info.get("io_note"), with_rss=variant == "default"
                )

    def _peer_workloads(
        self,
        runner: PeerRunner,
        label: str,
        variant: str,
        mixed_note: str | None,
        io_note: str | None,
        with_rss: bool,
        with_enqueue: bool = True,
    ) -> None:
        """Every workload through the peer driver (also Conveyor's runtime; its enqueue is measured apart)."""
        plan, scale = self.plan, runner.peer.scale
        n = max(100, int(plan.n * scale))
        if with_enqueue:
            single, bulk = self.fig(label, variant, "enqueue_single"), self.fig(label, variant, "enqueue_bulk")
            server_bytes = None if runner.on_sqlite else self.fig(label, variant, "server_bytes")
            self.once([single], lambda: runner.enqueue(n, single, bulk, server_bytes))
            if not runner.info.get("bulk"):
                bulk.note = "no bulk enqueue API"
        drain = self.fig(label, variant, "drain")
        n_mem = max(100, int(plan.rss_tasks * scale))

        rss = self.fig(label, variant, "worker_rss") if with_rss else None

        cpu = self.fig(label, variant, "worker_cpu")

        def drain_once() -> None:
            drained = runner.drain("drain", n, 600)
            drain.runs.append(drained.rate)
            cpu.runs.append(drained.cpu_us)
            if rss is not None and n_mem <= n and not rss.runs:
                rss.runs.append(drained.rss_mb)

        self.once([drain, cpu], drain_once)
        p50, p99 = self.fig(label, variant, "latency_p50"), self.fig(label, variant, "latency_p99")

        def latency() -> None:
            a, b = runner.latency(plan.latency_n, 120)
            p50.runs.append(a)
            p99.runs.append(b)

        self.once([p50, p99], latency)
        mixed = self.fig(label, variant, "mixed")
        if mixed_note:
            mixed.note = f"not measured: {mixed_note}"
        else:
            m = max(100, int(plan.n // 4 * scale))
            self.once([mixed], lambda: mixed.runs.append(runner.mixed(m, 300)))
        io = self.fig(label, variant, "io")
        io_n = max(100, int(plan.n // 4 * min(1.0, scale * 2)))
        if not (io_note or "").startswith("not run"):
            self.once([io], lambda: io.runs.append(runner.drain("io", io_n, 600).rate))
        if io_note:
            io.note = io_note
        if rss is not None:
            if n_mem > n and not rss.runs:  # once per run
                worker_rss = rss
                self.once([rss], lambda: worker_rss.runs.append(runner.drain("drain", n_mem, 900).rss_mb))
            rss.note = f"after {max(n_mem, n)} tasks"

    def dump(self, path: Path, meta: dict[str, Any]) -> None:
        data = {"meta": meta, "settings": self.settings, "figures": [f.to_json() for f in self.figures]}
        path.write_text(json.dumps(data, indent=1))


def _python() -> str:
    import sys

    return sys.executable


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    return env


def new_sqlite_dir(prefix: str = "conveyor-bench-sqlite-") -> Path:
    """A temporary directory for a run's SQLite files, removed when the process exits normally or by
    ``sys.exit`` (``python -m bench`` turns a SIGTERM into that)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
