"""Starting real worker processes for fault tests, and reading the ledger they write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

APPS_ROOT = Path(__file__).resolve().parent.parent  # tests/faults: makes ``apps.ledger_app`` importable
SRC = Path(__file__).resolve().parents[3] / "src"

#: Short leases for tests: lease 2 s, heartbeat 0.5 s, reaper 0.5 s.
LEASE, HEARTBEAT, REAPER = 2.0, 0.5, 0.5
FAST = ["--lease", str(LEASE), "--heartbeat", str(HEARTBEAT), "--reaper-interval", str(REAPER)]
FAST += ["--poll-interval", "0.1", "--promoter-interval", "0.2", "--registry-interval", "0.5"]


@dataclass(frozen=True)
class Entry:
    event: str
    key: str
    pid: int
    attempt: int
    at: float


@dataclass
class Cluster:
    """Worker processes sharing one broker URL and one ledger file; every process is killed at the end."""

    url: str
    workdir: Path
    max_stalls: int = 3
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ledger(self) -> Path:
        return self.workdir / "ledger.txt"

    def spawn(self, *args: str, grace: float = 5.0) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(
            CONVEYOR_URL=self.url,
            FAULT_LEDGER=str(self.ledger),
            FAULT_MAX_STALLS=str(self.max_stalls),
            PYTHONPATH=os.pathsep.join([str(APPS_ROOT), str(SRC), env.get("PYTHONPATH", "")]),
        )
        log = open(self.workdir / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        argv = [sys.executable, "-m", "conveyor.worker", "apps.ledger_app:app", *FAST, "--grace", str(grace), *args]
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
        self.procs.append(proc)
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.workdir / f"worker-{self.procs.index(proc)}.log").read_text(errors="replace")

    def entries(self, event: str | None = None, key: str | None = None) -> list[Entry]:
        if not self.ledger.exists():
            return []
        out = []
        text = self.ledger.read_text()
        # a line being appended may be read half written (a write crossing a page boundary shows its
        # first page first): only lines whole up to their newline count, the rest is read next time
        for line in text[: text.rfind("\n") + 1].splitlines():
            ev, k, pid, attempt, at = line.split()
            if (event is None or ev == event) and (key is None or k == key):
                out.append(Entry(ev, k, int(pid), int(attempt), float(at)))
        return out

    def proc(self, pid: int) -> subprocess.Popen[bytes]:
        return next(p for p in self.procs if p.pid == pid)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(proc.pid, sig)
                    except ProcessLookupError:
                        pass
                # a supervisor's children live in their own sessions: kill them by their group
            proc.wait(timeout=10)
        for pid in _children_pids(self.workdir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _children_pids(workdir: Path) -> list[int]:
    """Pids of leftover ``conveyor.worker`` children whose cwd is ``workdir`` (supervisor children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (
                Path(entry, "cwd").resolve() == workdir.resolve()
                and b"conveyor.worker" in Path(entry, "cmdline").read_bytes()
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
