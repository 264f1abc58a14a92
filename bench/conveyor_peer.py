"""Conveyor driven like a peer (``peers/_driver.py conveyor ...``): producer and runtime worker processes.

Used for the sqlite and redis backends once the worker runtime exists, so Conveyor is measured by
exactly the same harness code as the peers. ``BENCH_URL`` names the broker.
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Any

from bench.recorder import hit
from bench.workload import IO, TUNED, noop_kwargs
from conveyor import Conveyor
from conveyor.retry import Fixed

__all__ = ["BULK", "MIXED", "SETTINGS", "Producer", "run_worker"]

SETTINGS = {
    "default": "WorkerConfig() defaults (concurrency 10, prefetch 0, poll_interval 0.5 s); io: concurrency 100",
    "tuned": "WorkerConfig(prefetch=64, poll_interval=0.005); io: concurrency 100",
}
BULK = True
MIXED = None

app = Conveyor(os.environ.get("BENCH_URL", "memory://"))


@app.task
def noop(ts: float | None = None, fail: bool = False) -> None:
    hit(ts, fail)


@app.task
async def sleepy() -> None:
    hit()
    await asyncio.sleep(0.001)


class Producer:
    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        app.close()

    def one(
        self,
        task: str,
        ts: float | None = None,
        fail: bool = False,
        delay: float | None = None,
        priority: int | None = None,
    ) -> None:
        if task == "sleepy":
            sleepy.enqueue()
            return
        kwargs = noop_kwargs(ts, fail)
        options: dict[str, Any] = {}
        if fail:
            options.update(max_retries=2, backoff=Fixed(0))
        if delay:
            options["delay"] = delay
        if priority is not None:
            options["priority"] = priority
        if options:
            noop.with_options(**options).enqueue(**kwargs)
        else:
            noop.enqueue(**kwargs)

    def bulk(self, task: str, count: int) -> None:
        target = sleepy if task == "sleepy" else noop
        chunk = 10_000
        for start in range(0, count, chunk):
            target.enqueue_many([((), {})] * min(chunk, count - start))


def worker_settings() -> dict[str, Any]:
    """The variant's ``WorkerConfig`` settings; io asks for 100 concurrent tasks."""
    wanted: dict[str, Any] = {"prefetch": 64, "poll_interval": 0.005} if TUNED else {}
    if IO:
        wanted["concurrency"] = 100
    return wanted


def run_worker() -> None:
    app.worker(**worker_settings()).run()
