"""Counts task executions inside a worker process and writes a JSON file when the expected count is reached.

Stdlib only: it is imported by Conveyor's bench worker and by every peer script (peer virtualenv).
Timing inside the worker excludes worker start-up: a drain rate is measured from the first task's
start to the last task's end. The environment configures it:

``BENCH_DONE_FILE``  where to write ``{"first", "last", "ok", "failed", "latencies"}`` once done;
``BENCH_EXPECT_OK`` / ``BENCH_EXPECT_FAIL``  executions to wait for (successful / raising);
``BENCH_READY_FILE``  written at the first execution (the harness waits for it before pacing).
"""

from __future__ import annotations

import json
import os
import threading
import time

__all__ = ["Failure", "hit"]


class Failure(Exception):
    """Raised by the mixed workload's failing tasks."""


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done_file = os.environ.get("BENCH_DONE_FILE", "")
        self.ready_file = os.environ.get("BENCH_READY_FILE", "")
        self.expect_ok = int(os.environ.get("BENCH_EXPECT_OK", "0") or 0)
        self.expect_fail = int(os.environ.get("BENCH_EXPECT_FAIL", "0") or 0)
        self.first = 0.0
        self.ok = 0
        self.failed = 0
        self.latencies: list[float] = []
        self.written = False

    def hit(self, enqueued_at: float | None, fail: bool) -> None:
        now = time.time()
        with self.lock:
            if not self.first:
                self.first = now
                if self.ready_file:
                    _write(self.ready_file, {"first": now})
            if enqueued_at is not None:
                self.latencies.append(now - enqueued_at)
            if fail:
                self.failed += 1
            else:
                self.ok += 1
            if self.written or not self.done_file:
                return
            if self.ok >= self.expect_ok and self.failed >= self.expect_fail:
                self.written = True
                payload = {
                    "first": self.first,
                    "last": time.time(),
                    "ok": self.ok,
                    "failed": self.failed,
                    "latencies": self.latencies,
                }
                _write(self.done_file, payload)


def _write(path: str, payload: dict[str, object]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


_RECORDER = _Recorder()


def hit(enqueued_at: float | None = None, fail: bool = False) -> None:
    """Record one execution (call it first thing in a handler); raises ``Failure`` when ``fail``."""
    _RECORDER.hit(enqueued_at, fail)
    if fail:
        raise Failure("planned failure")
