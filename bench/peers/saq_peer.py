"""SAQ (asyncio, Redis); one worker process."""

import asyncio
import os
import time

from saq import Queue, Worker

from bench.recorder import hit

VARIANT = os.environ.get("BENCH_VARIANT", "default")
WORKLOAD = os.environ.get("BENCH_WORKLOAD", "drain")
TUNED = VARIANT == "tuned"
IO = WORKLOAD == "io"

SETTINGS = {
    "default": "Worker defaults: concurrency=10",
    "tuned": "concurrency=50",
}
BULK = False
MIXED = None  # priorities: SAQ supports them on Postgres only; failures retried (retries=3 attempts)
IO_NOTE = "concurrency=100"


def _queue():
    return Queue.from_url(os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"), name="bench")


async def noop(ctx, *, ts=None, fail=False):
    hit(ts, fail)


async def sleepy(ctx):
    hit()
    await asyncio.sleep(0.001)


class AsyncProducer:
    async def __aenter__(self):
        self.queue = _queue()
        await self.queue.connect()
        return self

    async def __aexit__(self, *exc):
        await self.queue.disconnect()

    async def one(self, task, ts=None, fail=False, delay=None, priority=None):
        kwargs = {}
        if ts is not None:
            kwargs["ts"] = ts
        if fail:
            kwargs["fail"] = True
            kwargs["retries"] = 3
            kwargs["retry_delay"] = 0.0
        if delay:
            kwargs["scheduled"] = int(time.time() + delay)
        await self.queue.enqueue(task, **kwargs)

    async def bulk(self, task, count):
        raise NotImplementedError


async def run_worker():
    concurrency = 100 if IO else (50 if TUNED else 10)
    worker = Worker(_queue(), functions=[noop, sleepy], concurrency=concurrency)
    await worker.start()
