"""taskiq with taskiq-redis's ``RedisStreamBroker`` (acknowledged delivery); one worker process."""

import asyncio
import os
import sys

from taskiq_redis import RedisStreamBroker

from bench.recorder import hit
from bench.workload import IO, TUNED, URL

SETTINGS = {
    "default": "RedisStreamBroker, `taskiq worker --workers 1` (defaults otherwise), no result backend",
    "tuned": "RedisStreamBroker(xread_count=1000), --workers 1 --max-async-tasks 1000 --max-prefetch 1000, "
    "--log-level WARNING, no result backend",
}
BULK = False
MIXED = "delayed tasks need taskiq's separate scheduler process and the Redis brokers have no priorities"
IO_NOTE = "--max-async-tasks 100"

broker = RedisStreamBroker(URL, xread_count=1000) if TUNED else RedisStreamBroker(URL)


@broker.task(task_name="noop")
async def noop(ts=None, fail=False):
    hit(ts, fail)


@broker.task(task_name="sleepy")
async def sleepy():
    hit()
    await asyncio.sleep(0.001)


class AsyncProducer:
    async def __aenter__(self):
        await broker.startup()
        return self

    async def __aexit__(self, *exc):
        await broker.shutdown()

    async def one(self, task, ts=None, fail=False, delay=None, priority=None):
        if task == "sleepy":
            await sleepy.kiq()
        elif ts is not None:
            await noop.kiq(ts=ts)
        else:
            await noop.kiq()


def run_worker():
    argv = [sys.executable, "-m", "taskiq", "worker", "taskiq_peer:broker", "--workers", "1"]
    if TUNED:
        argv += ["--max-async-tasks", "1000", "--max-prefetch", "1000", "--log-level", "WARNING"]
    if IO:
        argv += ["--max-async-tasks", "100"]
    os.execv(sys.executable, argv)
