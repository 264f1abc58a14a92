"""arq (asyncio); one worker process."""

import asyncio

from arq import Retry, create_pool
from arq.connections import RedisSettings
from arq.worker import Worker

from bench.recorder import Failure, hit
from bench.workload import IO, TUNED, URL, noop_kwargs

SETTINGS = {
    "default": "Worker defaults: max_jobs=10, poll_delay=0.5 s, keep_result=3600 s",
    "tuned": "max_jobs=100, poll_delay=0.01 s, keep_result=0, log_results=False",
}
BULK = False
MIXED = None  # priorities: not supported; failures retried by raising arq.Retry(defer=0)
IO_NOTE = "max_jobs=100"


def _settings():
    return RedisSettings.from_dsn(URL)


async def noop(ctx, ts=None, fail=False):
    try:
        hit(ts, fail)
    except Failure:
        if ctx["job_try"] < 3:
            raise Retry(defer=0) from None
        raise


async def sleepy(ctx):
    hit()
    await asyncio.sleep(0.001)


class AsyncProducer:
    async def __aenter__(self):
        self.pool = await create_pool(_settings())
        return self

    async def __aexit__(self, *exc):
        await self.pool.aclose()

    async def one(self, task, ts=None, fail=False, delay=None, priority=None):
        kwargs = noop_kwargs(ts, fail)
        await self.pool.enqueue_job(task, _defer_by=delay, **kwargs)


def run_worker():
    options = {}
    if TUNED:
        options = {"max_jobs": 100, "poll_delay": 0.01, "keep_result": 0, "log_results": False}
    if IO:
        options["max_jobs"] = 100
    worker = Worker(functions=[noop, sleepy], redis_settings=_settings(), **options)
    worker.run()
