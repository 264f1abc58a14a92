"""Throughput of the SQLite broker against the in-memory reference: ``python bench/bench_sqlite.py``.

Measures, per backend: single enqueue (one task per call, one transaction each), batch enqueue
(``enqueue`` of BATCH tasks per call) and drain (claim ``limit=BATCH`` + one ``settle`` of the
batch, no-op tasks) in this one process, which plays the single worker. Times are wall-clock;
task times go through ``now`` like everywhere else. Options: ``--tasks N``, ``--batch N``,
``--synchronous MODE``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from conveyor.brokers.base import Broker
from conveyor.brokers.memory import MemoryBroker
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy, NewTask, Outcome

SINGLE = 2_000


def _tasks(prefix: str, count: int) -> list[NewTask]:
    return [NewTask(f"{prefix}-{i}", "noop", "default", "[[],{}]") for i in range(count)]


def _rate(count: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return count / (time.perf_counter() - start)


def measure(broker: Broker, tasks: int, batch: int, claim: int) -> dict[str, float]:
    now = time.time()
    singles = _tasks("s", SINGLE)

    def enqueue_single() -> None:
        for task in singles:
            broker.enqueue([task], now)

    many = _tasks("b", tasks)

    def enqueue_batch() -> None:
        for i in range(0, tasks, batch):
            broker.enqueue(many[i : i + batch], now)

    def drain() -> None:
        while True:
            claimed = broker.claim(["default"], now, 60.0, limit=claim)
            if not claimed:
                return
            broker.settle([Outcome(r.id, r.lease_token or "", "complete", result="null") for r in claimed], now)

    return {
        "enqueue single": _rate(SINGLE, enqueue_single),
        "enqueue batch": _rate(tasks, enqueue_batch),
        "drain": _rate(tasks + SINGLE, drain),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--claim", type=int, default=None)
    parser.add_argument("--synchronous", default="NORMAL")
    args = parser.parse_args()
    claim = args.claim or args.batch
    results: dict[str, dict[str, float]] = {}
    results["memory"] = measure(MemoryBroker(BrokerPolicy()), args.tasks, args.batch, claim)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}?synchronous={args.synchronous}"
        broker = SQLiteBroker.from_url(url, BrokerPolicy())
        try:
            results["sqlite"] = measure(broker, args.tasks, args.batch, claim)
        finally:
            broker.close()
    print(f"{args.tasks} tasks, batch {args.batch}, claim {claim}, sqlite synchronous={args.synchronous}")
    print(f"{'tasks/s':<16}{'memory':>12}{'sqlite':>12}{'sqlite/memory':>15}")
    for metric in results["memory"]:
        mem, lite = results["memory"][metric], results["sqlite"][metric]
        print(f"{metric:<16}{mem:>12,.0f}{lite:>12,.0f}{lite / mem:>15.2f}")


if __name__ == "__main__":
    main()
