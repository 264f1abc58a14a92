"""SAQ (asyncio, Redis); one worker process."""

import asyncio
import time

from saq import Queue, Worker

from bench.recorder import hit
from bench.workload import IO, TUNED, URL, noop_kwargs

SETTINGS = {
    "default": "Worker defaults: concurrency=10",
    "tuned": "concurrency=50",
}
BULK = False
MIXED = None  # priorities: SAQ supports them on Postgres only; failures retried (retries=3 attempts)
IO_NOTE = "concurrency=100"


def _queue():
    return Queue.from_url(URL, name="bench")


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
        kwargs = noop_kwargs(ts, fail)
        if fail:
            kwargs["retries"] = 3
            kwargs["retry_delay"] = 0.0
        if delay:
            kwargs["scheduled"] = int(time.time() + delay)
        await self.queue.enqueue(task, **kwargs)


async def run_worker():
    concurrency = 100 if IO else (50 if TUNED else 10)
    worker = Worker(_queue(), functions=[noop, sleepy], concurrency=concurrency)
    await worker.start()
