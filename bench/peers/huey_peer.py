"""Huey on Redis: ``RedisHuey``, and ``PriorityRedisHuey`` for the mixed workload (priorities)."""

import os
import time

from huey import PriorityRedisHuey, RedisHuey

from bench.recorder import hit
from bench.workload import IO, TUNED, URL, WORKLOAD, noop_kwargs

SETTINGS = {
    "default": "RedisHuey (PriorityRedisHuey for mixed), consumer workers=1 (thread), results on, blocking reads",
    "tuned": "RedisHuey(results=False), consumer workers=1 (thread), periodic off, no health checks",
}
BULK = False
MIXED = None
IO_NOTE = "consumer with 100 worker threads"

_CLASS = PriorityRedisHuey if WORKLOAD == "mixed" else RedisHuey
huey = _CLASS("bench", url=URL, results=not TUNED)


@huey.task(retries=0, retry_delay=0)
def noop(ts=None, fail=False):
    hit(ts, fail)


@huey.task()
def sleepy():
    hit()
    time.sleep(0.001)


class Producer:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def one(self, task, ts=None, fail=False, delay=None, priority=None):
        if task == "sleepy":
            sleepy()
            return
        kwargs = noop_kwargs(ts, fail)
        retries = 2 if fail else None
        if delay:
            noop.schedule(kwargs=kwargs, delay=delay, priority=priority, retries=retries)
        elif priority is not None or retries:
            task = noop.s(**kwargs)
            task.priority = priority
            if retries:
                task.retries = retries
            huey.enqueue(task)
        else:
            noop(**kwargs)


def run_worker():
    consumer = huey.create_consumer(
        workers=100 if IO else int(os.environ.get("BENCH_THREADS") or 1),  # BENCH_THREADS: a trial's setting
        worker_type="thread",
        periodic=not TUNED,
        check_worker_health=not TUNED,
    )
    consumer.run()
