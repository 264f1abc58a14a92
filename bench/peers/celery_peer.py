"""Celery on Redis; the pool (``threads`` or ``prefork``) comes from ``BENCH_POOL``."""

import os
import time

from celery import Celery

from bench.recorder import Failure, hit
from bench.workload import IO, TUNED, URL, noop_kwargs

POOL = os.environ.get("BENCH_POOL", "threads")

# prefork runs one pool process: the workload is one worker process, and the recorder counts per process
_CONCURRENCY = "nproc (default)" if POOL == "threads" else "1 pool process"
SETTINGS = {
    "default": f"-P {POOL}, concurrency {_CONCURRENCY}, prefetch multiplier 4, gossip/mingle/heartbeat on, "
    "no result backend (Celery's default), loglevel INFO",
    "tuned": f"-P {POOL}, concurrency {_CONCURRENCY}, prefetch multiplier 64, task_ignore_result, "
    "--without-gossip --without-mingle --without-heartbeat, loglevel WARNING",
}
BULK = False
MIXED = None  # priorities via the redis transport's priority steps
IO_NOTE = "-P threads -c 100" if POOL == "threads" else "not run: 100 prefork processes do not fit this machine"

app = Celery("celery_peer", broker=URL)
app.conf.update(
    broker_transport_options={"priority_steps": list(range(10)), "queue_order_strategy": "priority"},
    worker_hijack_root_logger=True,
    broker_connection_retry_on_startup=True,
)
if TUNED:
    app.conf.update(task_ignore_result=True, worker_prefetch_multiplier=64)


@app.task(name="noop", autoretry_for=(Failure,), retry_kwargs={"max_retries": 2, "countdown": 0})
def noop(ts=None, fail=False):
    hit(ts, fail)


@app.task(name="sleepy")
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
            sleepy.delay()
            return
        kwargs = noop_kwargs(ts, fail)
        if delay or priority is not None:
            noop.apply_async(kwargs=kwargs, countdown=delay, priority=priority)
        else:
            noop.delay(**kwargs)


def run_worker():
    concurrency = 100 if IO else ((os.cpu_count() or 1) if POOL == "threads" else 1)
    argv = ["worker", "-P", POOL, "-c", str(concurrency), "-Q", "celery", "--loglevel", "WARNING" if TUNED else "INFO"]
    if TUNED:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    app.worker_main(argv)
