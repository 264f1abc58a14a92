"""Conveyor driven like a peer (``peers/_driver.py conveyor ...``): producer and runtime worker processes.

Used for the sqlite and redis backends, so Conveyor is measured by exactly the same harness code as
the peers. ``BENCH_URL`` names the broker. The worker is ``conveyor worker bench.conveyor_peer:app``
as a user starts it (the driver process becomes it, so the harness stops and measures the process it
started): the default row gives it nothing but the broker URL, with its default log level; the tuned
row lists every option it adds.
"""

from __future__ import annotations

import asyncio
import os
import sys
from types import TracebackType
from typing import Any

from bench.recorder import hit
from bench.workload import IO, TUNED, noop_kwargs
from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.retry import Fixed

__all__ = ["BULK", "MIXED", "SETTINGS", "Producer", "run_worker"]

SETTINGS = {
    "default": "`conveyor worker bench.conveyor_peer:app`, nothing else given: WorkerConfig defaults "
    "(concurrency 10, prefetch by rate, claimers 2 on Redis), --log-level info; io: --concurrency 100",
    "tuned": "the default command with --concurrency 200 --log-level warning and CONVEYOR_WORKER_PREFETCH=200 "
    "(bench_redis's runtime drain); io: --concurrency 100",
}
BULK = True
MIXED = None


def _app() -> Conveyor:
    """The app on ``BENCH_URL``; with ``BENCH_REDIS_LAYOUT=4`` (``drain_ratio --backends redis4``) its
    Redis broker uses layout 4's keys, the namespace in one slot (the default: layout 5's)."""
    url = os.environ.get("BENCH_URL", "memory://")
    if os.environ.get("BENCH_REDIS_LAYOUT") == "4":
        config = RedisConfig.from_url(url)
        return Conveyor(broker=RedisBroker(config, keys=Keys(config.namespace)))
    return Conveyor(url)


app = _app()


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


def worker_command() -> tuple[list[str], dict[str, str]]:
    """The variant's ``conveyor worker`` command line and the ``CONVEYOR_WORKER_*`` variables it adds."""
    argv = [sys.executable, "-m", "conveyor", "worker", "bench.conveyor_peer:app"]
    env: dict[str, str] = {}
    if TUNED:
        argv += ["--log-level", "warning"]
        env["CONVEYOR_WORKER_PREFETCH"] = "200"
    if IO:
        argv += ["--concurrency", "100"]
    elif TUNED:
        argv += ["--concurrency", "200"]
    return argv, env


def run_worker() -> None:
    """Become ``conveyor worker`` (same process id: the harness measures and stops what it started)."""
    argv, env = worker_command()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_WORKER_")}
    # settings a trial adds (python -m bench.drain_ratio --env), as "NAME=VALUE;NAME=VALUE"
    trial = [item.split("=", 1) for item in os.environ.get("BENCH_CONVEYOR_ENV", "").split(";") if item]
    os.execve(sys.executable, argv, {**inherited, **env, **dict(trial)})
