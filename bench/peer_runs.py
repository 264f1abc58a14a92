"""Runs the workloads on the peers: each producer and each worker in its own subprocess (peers venv)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from bench.measure import Figure, percentile
from bench.procs import run_json, stop_group, tree_cpu, tree_rss, wait_for_file
from bench.server import Server

__all__ = ["PEERS", "SQLITE_PEER", "Drained", "Peer", "PeerRunner", "sqlite_peers"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Peer:
    """A library as reported (``label``), the script that drives it, and its relative speed."""

    label: str
    module: str
    env: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0  # fraction of N used for slow libraries (the figures are rates)
    variants: tuple[str, ...] = ("default", "tuned")


PEERS = [
    Peer("RQ (SimpleWorker)", "rq", scale=0.15),
    Peer("arq", "arq", scale=0.5),
    Peer("Dramatiq", "dramatiq", scale=0.5),
    Peer("Huey", "huey"),
    Peer("Celery (threads)", "celery", (("BENCH_POOL", "threads"),), scale=0.25),
    Peer("Celery (prefork)", "celery", (("BENCH_POOL", "prefork"),), scale=0.25),
    Peer("taskiq (taskiq-redis stream)", "taskiq", scale=0.5),
    Peer("SAQ", "saq", scale=0.5),
]


#: How the SQLite peers' labels start (the report compares Conveyor on SQLite with them apart).
SQLITE_PEER = "Huey (SqliteHuey"


def sqlite_peers(sqlite_dir: Path) -> list[Peer]:
    """The embedded peers of Conveyor's SQLite broker: Huey's ``SqliteHuey`` on a file of ``sqlite_dir``,
    its consumer with 1 and with 8 threads, as a user starts it (the default settings only)."""
    url = f"sqlite:///{sqlite_dir / 'huey.db'}"
    return [
        Peer(
            f"{SQLITE_PEER}, {threads})",
            "huey_sqlite",
            (("BENCH_URL", url), ("BENCH_THREADS", count)),
            0.5,
            ("default",),
        )
        for threads, count in (("1 thread", "1"), ("8 threads", "8"))
    ]


class Drained(NamedTuple):
    """One drain: tasks/s, the worker's RSS after it (MB), its CPU per task (µs; the process tree)."""

    rate: float
    rss_mb: float
    cpu_us: float


class PeerRunner:
    """Runs one peer's workloads against the shared server."""

    def __init__(self, python: Path, server: Server, peer: Peer, variant: str, log_dir: Path) -> None:
        self.python = python
        self.server = server
        self.peer = peer
        self.variant = variant
        self.log_dir = log_dir
        self.info: dict[str, Any] = {}

    def _env(self, workload: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BENCH_URL=self.server.url,
            BENCH_VARIANT=self.variant,
            BENCH_WORKLOAD=workload,
            PYTHONPATH=f"{ROOT}{os.pathsep}{HERE / 'peers'}",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.peer.env)
        env.update(extra or {})
        return env

    @property
    def on_sqlite(self) -> bool:
        """Whether the peer stores its queue in a SQLite file (no server involved)."""
        return dict(self.peer.env).get("BENCH_URL", "").startswith("sqlite:///")

    def reset(self) -> None:
        """Empty the store: flush the server, or delete the SQLite database the peer uses."""
        self.server.flush()
        url = dict(self.peer.env).get("BENCH_URL", "")
        if url.startswith("sqlite:///"):
            for suffix in ("", "-wal", "-shm"):
                Path(url.removeprefix("sqlite://") + suffix).unlink(missing_ok=True)

    def _driver(self, *args: str) -> list[str]:
        return [str(self.python), str(HERE / "peers" / "_driver.py"), self.peer.module, *args]

    def load_info(self) -> dict[str, Any]:
        self.info = run_json(self._driver("info"), self._env("drain"), 120)
        return self.info

    def produce(self, workload: str, n: int, mode: str = "single", timeout: float = 600) -> float:
        result = run_json(self._driver("produce", workload, str(n), mode), self._env(workload), timeout)
        return float(result["elapsed"])

    def start_worker(self, workload: str, files: dict[str, str]) -> subprocess.Popen[bytes]:
        name = self.peer.label.split(" (")[0] if self.peer.module == "conveyor" else self.peer.module
        pool = dict(self.peer.env).get("BENCH_POOL", "")
        threads = dict(self.peer.env).get("BENCH_THREADS", "")
        pool = f"{pool}{threads}t" if threads else pool
        stem = "-".join(filter(None, [name.lower().replace(" ", "_"), pool, self.variant, workload]))
        log = open(self.log_dir / f"{stem}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            self._driver("worker", workload),
            env=self._env(workload, files),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return proc

    def _fill(self, workload: str, n: int) -> None:
        self.produce(workload, n, "bulk" if self.info.get("bulk") else "single")

    # -- workloads -------------------------------------------------------------------------------

    def enqueue(self, n: int, single: Figure, bulk: Figure, mem: Figure | None) -> None:
        """Enqueue rates; ``mem``: the server's bytes per queued task (None for a peer on a SQLite file)."""
        self.reset()
        before = self.server.used_memory()
        single.runs.append(n / self.produce("enqueue", n, "single"))
        if mem is not None:
            mem.runs.append((self.server.used_memory() - before) / n)
        if self.info.get("bulk"):
            self.reset()
            bulk.runs.append(n / self.produce("enqueue", n, "bulk"))

    def drain(self, workload: str, n: int, timeout: float) -> Drained:
        """Fill the queue with n tasks, then start the worker; its rate from the first task's start to the
        last one's end, its RSS after, and its CPU per task (read at the first task and after the last)."""
        self.reset()
        self._fill(workload, n)
        with tempfile.TemporaryDirectory() as tmp:
            done, ready = Path(tmp) / "done.json", Path(tmp) / "ready.json"
            files = {"BENCH_DONE_FILE": str(done), "BENCH_READY_FILE": str(ready), "BENCH_EXPECT_OK": str(n)}
            proc = self.start_worker(workload, files)
            try:
                wait_for_file(ready, timeout, proc)
                cpu_start = tree_cpu(proc.pid)
                result = wait_for_file(done, timeout, proc)
                cpu = tree_cpu(proc.pid) - cpu_start
                time.sleep(0.2)
                rss = tree_rss(proc.pid)
            finally:
                stop_group(proc)
        return Drained(n / (float(result["last"]) - float(result["first"])), rss, cpu / n * 1e6)

    def _started_worker(self, workload: str, tmp: Path, ok: int, fail: int) -> subprocess.Popen[bytes]:
        env = {
            "BENCH_DONE_FILE": str(tmp / "done.json"),
            "BENCH_READY_FILE": str(tmp / "ready.json"),
            "BENCH_EXPECT_OK": str(ok),
            "BENCH_EXPECT_FAIL": str(fail),
        }
        proc = self.start_worker(workload, env)
        try:
            self.produce(workload, 1, "warmup")
            wait_for_file(tmp / "ready.json", 60, proc)
        except BaseException:
            stop_group(proc)
            raise
        return proc

    def latency(self, n: int, timeout: float) -> tuple[float, float]:
        """Idle worker, n tasks paced at 200/s; returns (p50, p99) in ms."""
        self.reset()
        with tempfile.TemporaryDirectory() as tmp:
            proc = self._started_worker("latency", Path(tmp), n + 1, 0)
            try:
                time.sleep(0.5)  # let the worker go idle
                self.produce("latency", n)
                result = wait_for_file(Path(tmp) / "done.json", timeout, proc)
            finally:
                stop_group(proc)
        lat = [v * 1000 for v in result["latencies"]]
        return percentile(lat, 50), percentile(lat, 99)

    def mixed(self, n: int, timeout: float) -> float:
        """Running worker; n tasks (10% failing with 2 retries, 10% delayed 0.5 s, priorities)."""
        self.reset()
        failing = len([i for i in range(n) if i % 10 == 0])
        with tempfile.TemporaryDirectory() as tmp:
            proc = self._started_worker("mixed", Path(tmp), n - failing + 1, failing * 3)
            try:
                start = time.time()
                self.produce("mixed", n)
                result = wait_for_file(Path(tmp) / "done.json", timeout, proc)
            finally:
                stop_group(proc)
        return n / (float(result["last"]) - start)


def peers_python(venv: Path) -> Path:
    return venv / "bin" / "python"
