"""RQ with ``SimpleWorker`` (runs tasks in the worker process, no fork per task)."""

import time
from datetime import timedelta

from redis import Redis
from rq import Queue, Retry, SimpleWorker

from bench.recorder import hit
from bench.workload import TUNED, URL, WORKLOAD, noop_kwargs

SETTINGS = {
    "default": "SimpleWorker, one queue, result_ttl default (500 s), logging INFO",
    "tuned": "SimpleWorker, result_ttl=0 (results not kept), logging WARNING",
}
BULK = True  # Queue.enqueue_many (one pipeline)
MIXED = None  # priorities: not supported (at_front only); delayed via the worker's scheduler
IO_NOTE = "SimpleWorker runs one task at a time (no concurrency setting)"

_EXTRA = {"result_ttl": 0} if TUNED else {}


def noop(ts=None, fail=False):
    hit(ts, fail)


def sleepy():
    hit()
    time.sleep(0.001)


def _queue():
    return Queue("bench", connection=Redis.from_url(URL))


class Producer:
    def __enter__(self):
        self.q = _queue()
        return self

    def __exit__(self, *exc):
        self.q.connection.close()

    def one(self, task, ts=None, fail=False, delay=None, priority=None):
        fn = noop if task == "noop" else sleepy
        kwargs = noop_kwargs(ts, fail)
        retry = Retry(max=2) if fail else None
        if delay:
            self.q.enqueue_in(timedelta(seconds=delay), fn, kwargs=kwargs, retry=retry, **_EXTRA)
        else:
            self.q.enqueue(fn, kwargs=kwargs, retry=retry, **_EXTRA)

    def bulk(self, task, count):
        fn = noop if task == "noop" else sleepy
        chunk = 1000
        for start in range(0, count, chunk):
            batch = [Queue.prepare_data(fn, **_EXTRA) for _ in range(min(chunk, count - start))]
            self.q.enqueue_many(batch)


def run_worker():
    q = _queue()
    worker = SimpleWorker([q], connection=q.connection)
    worker.work(logging_level="WARNING" if TUNED else "INFO", with_scheduler=WORKLOAD == "mixed")
