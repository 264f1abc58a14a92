"""Subprocess helpers: run a JSON-printing child, wait for a file, stop a process group, measure RSS and CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["run_json", "stop_group", "tree_cpu", "tree_rss", "wait_for_file"]

TICK = os.sysconf("SC_CLK_TCK")


def run_json(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` and parse the last line of its stdout as JSON. Raises RuntimeError on failure."""
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s") from None
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"exit {done.returncode}: {' | '.join(tail)}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def wait_for_file(path: Path, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> dict[str, Any]:
    """Wait until ``path`` exists and return its JSON; RuntimeError on timeout or if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode} before finishing")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not finished after {timeout:.0f} s")
        time.sleep(0.005)
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def tree_rss(pid: int) -> float:
    """Resident memory (MB) of a process and all its descendants."""
    total = 0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
        todo.extend(_children(current))
    return total / 1024


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (in clock ticks: 10 ms)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
        try:
            threads = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for thread in threads:
            try:
                todo += [int(c) for c in (thread / "children").read_text().split()]
            except OSError:
                continue
    return total


def stop_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop a child started with ``start_new_session=True``: SIGTERM its group, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    try:  # leftovers of the group (pool children)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
