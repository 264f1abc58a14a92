"""Huey on Redis: ``RedisHuey``, and ``PriorityRedisHuey`` for the mixed workload (priorities)."""

from huey import PriorityRedisHuey, RedisHuey

from bench.peers._huey_common import define
from bench.workload import TUNED, URL, WORKLOAD

SETTINGS = {
    "default": "RedisHuey (PriorityRedisHuey for mixed), consumer workers=1 (thread), results on, blocking reads",
    "tuned": "RedisHuey(results=False), consumer workers=1 (thread), periodic off, no health checks",
}
BULK = False
MIXED = None
IO_NOTE = "consumer with 100 worker threads"

_CLASS = PriorityRedisHuey if WORKLOAD == "mixed" else RedisHuey
huey = _CLASS("bench", url=URL, results=not TUNED)
Producer, run_worker = define(huey)
