"""Dramatiq with its Redis broker; one worker process (``dramatiq.Worker`` in this process)."""

import os
import threading
import time

import dramatiq
import dramatiq.worker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Retries

from bench.recorder import hit
from bench.workload import IO, TUNED, URL, noop_kwargs

SETTINGS = {
    "default": "RedisBroker, default middleware, 1 process x 8 threads, prefetch 2x threads",
    "tuned": "RedisBroker, Retries middleware only, 1 process x 2 threads, prefetch 512",
}
BULK = False
MIXED = None  # priorities: per actor only, not per message (the mixed run sets none)
IO_NOTE = "1 process x 100 threads"

broker = RedisBroker(url=URL, middleware=[Retries()]) if TUNED else RedisBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0, min_backoff=1, max_backoff=10)
def noop(ts=None, fail=False):
    hit(ts, fail)


@dramatiq.actor
def sleepy():
    hit()
    time.sleep(0.001)


class Producer:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        broker.close()

    def one(self, task, ts=None, fail=False, delay=None, priority=None):
        if task == "sleepy":
            sleepy.send()
            return
        kwargs = noop_kwargs(ts, fail)
        if fail or delay:
            options = {"max_retries": 2} if fail else {}
            noop.send_with_options(kwargs=kwargs, delay=int(delay * 1000) if delay else None, **options)
        else:
            noop.send(**kwargs)


def run_worker():
    threads = 100 if IO else (2 if TUNED else 8)
    if TUNED:
        dramatiq.worker.QUEUE_PREFETCH = 512  # what $dramatiq_queue_prefetch sets, read at import
    if os.environ.get("BENCH_PREFETCH"):  # a trial's setting (python -m bench.drain_ratio)
        dramatiq.worker.QUEUE_PREFETCH = int(os.environ["BENCH_PREFETCH"])
    worker = dramatiq.Worker(broker, worker_threads=threads)
    worker.start()
    threading.Event().wait()
