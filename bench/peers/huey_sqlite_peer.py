"""Huey on SQLite: ``SqliteHuey`` on the file of ``BENCH_URL`` (``sqlite:///path``), the embedded peer of
Conveyor's SQLite broker; ``BENCH_THREADS`` sets the consumer's worker threads (1 or 8)."""

from huey import SqliteHuey

from bench.peers._huey_common import define
from bench.workload import TUNED, URL

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
Producer, run_worker = define(huey)
