"""``conveyor demo`` / ``make demo``: a mixed batch through real worker processes on SQLite.

It creates a fresh SQLite file, enqueues a mix of tasks (fast, CPU, async, flaky with retries,
permanently failing, delayed, prioritised), starts two real worker processes, shows live progress,
stops the workers with SIGTERM once every task is finished, and prints a summary. It ends by itself,
with the command that opens the dashboard on its database. That database lives in one directory per
user (``$TMPDIR/conveyor-demo-<user>``), emptied at the start of each run, so runs leave nothing else.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from conveyor import Conveyor, TaskState

__all__ = ["main"]

STATES = [s.value for s in TaskState]
QUEUES = ("emails", "default", "reports")


def _enqueue_batch(app: Conveyor) -> int:
    from conveyor import _demo_tasks as demo

    count = 0
    emails = demo.send_email.enqueue_many([((f"user{i}@example.com",), {"subject": "Welcome"}) for i in range(600)])
    count += len(emails)
    for i in range(20):
        demo.flaky_webhook.enqueue(f"https://hooks.example.com/{i}", fail_times=i % 4)
    count += 20
    for i in range(5):
        demo.invalid_address.enqueue(f"nobody-{i}@invalid")
    count += 5
    for i in range(40):
        demo.hash_report.with_options(priority=i % 3).enqueue(20_000)
    count += 40
    for i in range(30):
        demo.summarize.enqueue(i)
    count += 30
    for i in range(10):
        demo.send_email.with_options(delay=4.0).enqueue(f"later{i}@example.com", subject="Reminder")
    count += 10
    return count


def _table(stats: dict[str, dict[str, int]], elapsed: float) -> Table:
    table = Table(title=f"Conveyor demo — {elapsed:5.1f} s", expand=False)
    table.add_column("queue")
    for state in STATES:
        table.add_column(state, justify="right")
    totals: Counter[str] = Counter()
    for queue in sorted(stats):
        counts = stats[queue]
        totals.update({s: counts.get(s, 0) for s in STATES})
        table.add_row(queue, *(str(counts.get(s, 0)) for s in STATES))
    table.add_row("[bold]all", *(f"[bold]{totals[s]}" for s in STATES))
    return table


def _start_workers(env: dict[str, str], n: int, log_path: Path) -> list[subprocess.Popen[bytes]]:
    """Real worker processes, as ``conveyor worker`` runs them; their logs go to ``log_path``."""
    cmd = [
        sys.executable,
        "-m",
        "conveyor.worker",
        "conveyor._demo_tasks:app",
        "--queues",
        ",".join(QUEUES),
        "--concurrency",
        "8",
    ]
    with log_path.open("ab") as log:
        return [subprocess.Popen(cmd, env=env, stdout=log, stderr=log) for _ in range(n)]


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes = []
    for proc in workers:
        try:
            codes.append(proc.wait(timeout=15))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return codes


def demo_dir() -> Path:
    """Where the demo keeps its database and worker log: the same directory every run."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name (some containers)
        user = str(os.getuid())
    return Path(tempfile.gettempdir()) / f"conveyor-demo-{user}"


def main(timeout: float = 120.0, workers: int = 2) -> int:
    """Run the demo; returns a process exit code (0 when every task finished as expected)."""
    console = Console(soft_wrap=True)  # piped output keeps its lines whole (URLs, commands)
    workdir = demo_dir()
    shutil.rmtree(workdir, ignore_errors=True)  # the last run's database: each run starts empty
    workdir.mkdir(mode=0o700)
    url = f"sqlite:///{workdir / 'demo.db'}"
    env = {**os.environ, "CONVEYOR_URL": url}
    os.environ["CONVEYOR_URL"] = url  # the demo tasks module builds its app from it
    app = Conveyor(url)
    console.print(f"[bold]Conveyor demo[/] on {escape(url)}")
    total = _enqueue_batch(app)
    console.print(f"enqueued {total} tasks; starting {workers} worker processes")
    started = time.monotonic()
    log_path = workdir / "workers.log"
    procs = _start_workers(env, workers, log_path)
    finished = False
    try:
        with Live(_table(app.stats(), 0.0), console=console, refresh_per_second=8) as live:
            while time.monotonic() - started < timeout:
                stats = app.stats()
                live.update(_table(stats, time.monotonic() - started))
                done = sum(q.get("completed", 0) + q.get("archived", 0) for q in stats.values())
                if done >= total:
                    finished = True
                    break
                if all(p.poll() is not None for p in procs):
                    break
                time.sleep(0.1)
    finally:
        codes = _stop_workers(procs)
    elapsed = time.monotonic() - started
    return _summary(console, app, total, elapsed, finished, codes, log_path)


def _summary(
    console: Console,
    app: Conveyor,
    total: int,
    elapsed: float,
    finished: bool,
    codes: list[int],
    log_path: Path,
) -> int:
    stats = app.stats()
    completed = sum(q["completed"] for q in stats.values())
    archived = sum(q["archived"] for q in stats.values())
    reasons: Counter[str] = Counter()
    retried = 0
    for queue in stats:
        for info in app.inspect.list(queue, TaskState.ARCHIVED, limit=1000):
            reasons[str(info.archive_reason)] += 1
        for info in app.inspect.list(queue, TaskState.COMPLETED, limit=1000):
            retried += info.attempts > 1
    console.print()
    console.print(
        f"[bold]Summary[/]: {completed} completed, {archived} archived of {total} in {elapsed:.1f} s "
        f"({completed / elapsed if elapsed else 0:.0f} tasks/s with {len(codes)} worker processes)"
    )
    why = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items())) or "none"
    console.print(f"  {retried} tasks succeeded after retries; archived by reason: {why}")
    console.print(f"  workers stopped gracefully with exit codes {codes}; their logs: {escape(str(log_path))}")
    if not finished:
        console.print("[red]demo did not finish in time[/]")
        console.print(log_path.read_text(errors="replace")[-3000:], markup=False)
        return 1
    app.close()
    _next_steps(console, str(app.url))
    return 0


def _next_steps(console: Console, url: str) -> None:
    command = shutil.which("conveyor") or str(Path(sys.executable).with_name("conveyor"))
    console.print()
    console.print("[bold]Next[/]: look around the demo's tasks in the dashboard (Ctrl-C stops it):")
    console.print(f"  {command} --url {url} dashboard", markup=False)
    console.print("  then read README.md (your own tasks), docs/cli.md (every command) and docs/operations.md")


if __name__ == "__main__":
    raise SystemExit(main())
