"""Conveyor measured in one process (``python -m bench.conveyor_runs BACKEND_URL WORKLOAD N``).

Prints one JSON line. This is how the memory backend is measured (it cannot be shared between
processes) and how every backend's enqueue rates are measured: ``steppable`` drains with
``Worker.run_until_idle()`` (one claim and one settle per task), ``batch`` with the broker's batch
claim and one settle per batch, a loop written here (``claim(limit=BATCH)`` + prepare and run each
+ ``settle(outcomes)``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

from conveyor import Conveyor
from conveyor.model import Outcome, TaskRecord
from conveyor.retry import Fixed
from conveyor.worker import Worker

__all__ = ["main"]

BATCH = 64
MIXED_DELAY = 0.5


class Bench:
    def __init__(self, url: str) -> None:
        self.app = Conveyor(url)
        self.executions = 0

        @self.app.task
        def noop(fail: bool = False) -> None:
            self.executions += 1
            if fail:
                raise RuntimeError("planned failure")

        self.noop = noop

    def fill(self, n: int) -> None:
        chunk = 10_000
        for start in range(0, n, chunk):
            self.noop.enqueue_many([((), {})] * min(chunk, n - start))

    def enqueue(self, n: int) -> dict[str, Any]:
        start = time.perf_counter()
        for _ in range(n):
            self.noop.enqueue()
        single = n / (time.perf_counter() - start)
        start = time.perf_counter()
        self.fill(n)
        bulk = n / (time.perf_counter() - start)
        return {"single": single, "bulk": bulk}

    def drain(self, n: int, mode: str) -> dict[str, Any]:
        self.fill(n)
        worker = self.app.worker()
        start = time.perf_counter()
        done = worker.run_until_idle() if mode == "steppable" else self._batch_loop(worker)
        elapsed = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"drained {done} of {n}")
        return {"rate": n / elapsed, "rss_mb": _rss_mb()}

    def _batch_loop(self, worker: Worker) -> int:
        broker, queues, lease = self.app.broker, list(worker.queues), worker.config.lease_for
        done = 0
        while True:
            records = broker.claim(queues, self.app.now(), lease, BATCH)
            if not records:
                return done
            outcomes = [_run_one(worker, record) for record in records]
            broker.settle(outcomes, self.app.now())
            done += len(records)

    def mixed(self, n: int) -> dict[str, Any]:
        """10% failing (2 retries, no backoff), 10% delayed 0.5 s, priorities 0-9; steppable worker."""
        failing = len(range(0, n, 10))
        expected = n - failing + 3 * failing
        worker = self.app.worker()
        start = time.perf_counter()
        for i in range(n):
            options: dict[str, Any] = {"priority": (i * 7) % 10}
            if i % 10 == 0:
                options.update(max_retries=2, backoff=Fixed(0))
            if i % 10 == 1:
                options["delay"] = MIXED_DELAY
            self.noop.with_options(**options).enqueue(fail=i % 10 == 0)
        deadline = time.monotonic() + 120
        while self.executions < expected:
            if not worker.run_until_idle():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mixed: {self.executions} of {expected} executions")
                time.sleep(0.001)
        return {"rate": n / (time.perf_counter() - start)}


def _run_one(worker: Worker, record: TaskRecord) -> Outcome:
    """What ``Worker.process_next`` does for one claimed task, minus the claim and the settle."""
    prepared = worker.executor.prepare(record)
    if isinstance(prepared, Outcome):
        return prepared
    return worker.runner.run_sync(prepared)


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        lines = status.read().splitlines()
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> None:
    url, workload, n = argv[1], argv[2], int(argv[3])
    bench = Bench(url)
    try:
        if workload == "enqueue":
            result = bench.enqueue(n)
        elif workload in ("steppable", "batch"):
            result = bench.drain(n, workload)
        elif workload == "mixed":
            result = bench.mixed(n)
        else:
            raise SystemExit(f"unknown workload {workload!r}")
    finally:
        bench.app.close()
    print(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main(sys.argv)
