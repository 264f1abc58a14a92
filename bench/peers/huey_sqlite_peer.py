"""Huey on SQLite: ``SqliteHuey`` on the file of ``BENCH_URL`` (``sqlite:///path``), the embedded peer of
Conveyor's SQLite broker; ``BENCH_THREADS`` sets the consumer's worker threads (1 or 8)."""

import os
import time

from huey import SqliteHuey

from bench.recorder import hit
from bench.workload import IO, TUNED, URL, noop_kwargs

SETTINGS = {
    "default": "SqliteHuey on a file, consumer workers=BENCH_THREADS (threads), results on",
    "tuned": "SqliteHuey(results=False), consumer workers=BENCH_THREADS (threads), periodic off, no health checks",
}
BULK = False
MIXED = None
IO_NOTE = "consumer with 100 worker threads"

# an in-memory placeholder when BENCH_URL is not SQLite, so the script imports for ``info``
_PATH = URL.removeprefix("sqlite://") if URL.startswith("sqlite:///") else ":memory:"
huey = SqliteHuey("bench", filename=_PATH, results=not TUNED)


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
        workers=100 if IO else int(os.environ.get("BENCH_THREADS") or 1),
        worker_type="thread",
        periodic=not TUNED,
        check_worker_health=not TUNED,
    )
    consumer.run()
