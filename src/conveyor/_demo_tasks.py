"""Tasks for ``conveyor demo``: a realistic mix of fast, slow, flaky, failing, async and delayed work.

The app reads its broker from ``CONVEYOR_URL`` (the demo points it at a fresh SQLite file), so the
demo's worker processes load this module exactly as ``conveyor worker conveyor._demo_tasks:app`` would.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from conveyor import Conveyor, Fixed, PermanentError, TaskContext

__all__ = ["app", "flaky_webhook", "hash_report", "invalid_address", "send_email", "summarize"]

app = Conveyor()


@app.task(queue="emails", max_retries=3, backoff=Fixed(0.2))
def send_email(to: str, subject: str) -> str:
    """Fast I/O-like work."""
    time.sleep(0.03)
    return f"sent {subject!r} to {to}"


@app.task(queue="default", max_retries=4, backoff=Fixed(1.0))
def flaky_webhook(ctx: TaskContext, url: str, fail_times: int) -> str:
    """Fails on its first ``fail_times`` attempts, then succeeds: shows retries with backoff."""
    if ctx.attempt <= fail_times:
        raise ConnectionError(f"{url} answered 503 (attempt {ctx.attempt})")
    return f"delivered to {url} on attempt {ctx.attempt}"


@app.task(queue="default", max_retries=0)
def invalid_address(to: str) -> None:
    """Always fails permanently: ends archived with reason ``permanent``."""
    raise PermanentError(f"{to} is not a deliverable address")


@app.task(queue="reports")
def hash_report(rows: int) -> str:
    """CPU work."""
    digest = hashlib.sha256()
    for i in range(rows):
        digest.update(i.to_bytes(8, "little"))
    return digest.hexdigest()[:16]


@app.task(queue="reports")
async def summarize(doc_id: int) -> str:
    """Async work (an AI call, say): runs on the worker's event loop."""
    await asyncio.sleep(0.02)
    return f"summary of document {doc_id}"
