"""What the Huey peers share (on Redis and on SQLite): the tasks, the producer and the consumer."""

import os
import time

from bench.recorder import hit
from bench.workload import IO, TUNED, noop_kwargs


def define(huey):
    """Register the bench's tasks on ``huey``; returns the peer's ``Producer`` class and ``run_worker``."""

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

    return Producer, run_worker
