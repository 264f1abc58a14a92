"""What ``conveyor worker`` logs with its defaults, as a user starts it: a real process on a private
server. A success is not an INFO line (two per task cost a no-op drain half its worker CPU); the
periodic summary is, and so is each retry and each failure."""

from __future__ import annotations

import re
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState
from conveyor.testing import poll_until

from .procs import clean_env, conveyor_argv

pytestmark = [pytest.mark.slow, pytest.mark.redis]

APP = """
from conveyor import Conveyor, current_task
from conveyor.retry import Fixed

app = Conveyor()  # CONVEYOR_URL


@app.task
def ok(i: int) -> int:
    return i


@app.task(max_retries=0)
def boom() -> None:
    raise ValueError("boom")


@app.task(max_retries=1, backoff=Fixed(0))
def flaky() -> str:
    if current_task().attempt == 1:
        raise RuntimeError("first attempt fails")
    return "second attempt"
"""

SUMMARY = re.compile(r"INFO conveyor\.worker: worker \S+: (last )?[\d.]+ s: (\d+) done, (\d+) failed, (\d+) retried")


@pytest.fixture
def worker_log(tmp_path: Path, redis_url: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``conveyor worker tasks_app:app`` with no option: only the broker URL, in ``CONVEYOR_URL``."""
    (tmp_path / "tasks_app.py").write_text(textwrap.dedent(APP))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            conveyor_argv("worker", "tasks_app:app"),
            cwd=tmp_path,
            env=clean_env(redis_url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_default_worker_logs_a_summary_and_no_info_line_per_success(
    worker_log: tuple[subprocess.Popen[bytes], Path], redis_url: str
) -> None:
    proc, log = worker_log
    producer = Conveyor(redis_url)
    try:
        handles = [producer.enqueue("ok", [i]) for i in range(20)]
        handles += [producer.enqueue("boom"), producer.enqueue("flaky")]
        states = {TaskState.COMPLETED, TaskState.ARCHIVED}
        poll_until(
            lambda: all(producer.get(h.id).state in states for h in handles),
            timeout=30,
            interval=0.05,
            message="every task to end",
        )
        # the default interval is 10 s: the first periodic line comes within 10 s of the worker's start
        poll_until(
            lambda: SUMMARY.search(log.read_text()), timeout=20, interval=0.05, message="the periodic summary line"
        )
    finally:
        producer.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    text = log.read_text()

    info = [line for line in text.splitlines() if " INFO " in line]
    assert not [line for line in info if "task started" in line or "task completed" in line], text
    summaries = [SUMMARY.search(line) for line in info]
    found = [m for m in summaries if m is not None]
    assert any(m.group(1) is None for m in found), text  # a periodic line, not only the last one
    totals = [sum(int(m.group(i)) for m in found) for i in (2, 3, 4)]
    assert totals == [21, 1, 1], text  # done (ok x20, flaky), failed (boom), retried (flaky)
    assert any("task archived" in line and "name=boom" in line for line in info), text
    assert any("task retry" in line and "name=flaky" in line for line in info), text
    assert re.search(r"INFO conveyor\.worker: worker \S+ starting", text), text
    assert re.search(r"INFO conveyor\.worker: worker \S+ stopped", text), text
