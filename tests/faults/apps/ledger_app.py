"""The app the fault tests run in real worker processes. Every execution appends to a ledger file.

Environment: ``CONVEYOR_URL`` (the broker), ``FAULT_LEDGER`` (the ledger path), ``FAULT_MAX_STALLS``.
Ledger lines: ``<event> <key> <pid> <attempt> <time>`` with event ``start``, ``done``, ``stopped`` or ``returned``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from apps import policies  # noqa: F401 - registers the custom backoff tasks may travel with
from conveyor import BrokerPolicy, Conveyor, Fixed, Middleware, TaskContext
from conveyor.model import Outcome

app = Conveyor(policy=BrokerPolicy(max_stalls=int(os.environ.get("FAULT_MAX_STALLS", "3"))))


def note(event: str, key: str, attempt: int) -> None:
    line = f"{event} {key} {os.getpid()} {attempt} {time.time():.6f}\n"
    fd = os.open(os.environ["FAULT_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write per line: O_APPEND keeps lines whole across processes
    finally:
        os.close(fd)


@app.task(max_retries=5)
def work(ctx: TaskContext, key: str, seconds: float) -> int:
    """Runs ``seconds`` (the workload the tests interrupt); returns the pid that ran it."""
    note("start", key, ctx.attempt)
    time.sleep(seconds)
    note("done", key, ctx.attempt)
    return os.getpid()


@app.task
def polite(ctx: TaskContext, key: str, seconds: float) -> int:
    """Like ``work``, but stops early (``stopped`` in the ledger) once told to (``ctx.should_stop()``)."""
    note("start", key, ctx.attempt)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.should_stop():
            note("stopped", key, ctx.attempt)
            break
        time.sleep(0.02)
    return os.getpid()


@app.task
async def waits(ctx: TaskContext, key: str, seconds: float) -> int:
    """An ``async def`` ``work``: notes ``stopped`` if it is cancelled (``CancelledError``) meanwhile."""
    note("start", key, ctx.attempt)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note("stopped", key, ctx.attempt)
        raise
    note("done", key, ctx.attempt)
    return os.getpid()


@app.task
def crash(ctx: TaskContext, key: str) -> None:
    """Kills its own process every time (a poison task)."""
    note("start", key, ctx.attempt)
    os._exit(1)


@app.task(max_retries=5, backoff=Fixed(5.0))
def refuse(ctx: TaskContext, key: str) -> None:
    """Fails every time (retried per the backoff it was enqueued with, else ``Fixed(5.0)``)."""
    note("start", key, ctx.attempt)
    raise ConnectionError("refused")


class KillAfterReturn(Middleware):
    """Kills the process after ``work`` returned on its first attempt, before the ack is written."""

    def after(self, ctx: TaskContext, outcome: Outcome) -> None:
        if ctx.name == "work" and ctx.attempt == 1 and outcome.kind == "complete":
            note("returned", ctx.task_id, ctx.attempt)
            os.kill(os.getpid(), signal.SIGKILL)


kill_after_return = KillAfterReturn()
