"""The SQLite floor of a run: ``python -m bench.sqlite_floors DIR COUNT`` prints one JSON line.

For ``synchronous=FULL`` and then ``NORMAL``, on fresh files in ``DIR`` (the disk the benchmark's
databases use: a tmpfs would sync for free): ``COUNT`` bare one-row WAL transactions (``BEGIN
IMMEDIATE``, one ``INSERT``, ``COMMIT``), then ``COUNT`` one-task ``enqueue`` calls of a Conveyor app at
the same setting, in this one process, one right after the other, so the disk's sync rate of the
moment weighs on both alike. Issue 42's aim: one ``enqueue`` costs at most 2x the bare transaction.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from bench.sqlite_worker import floors
from conveyor.brokers.sqlite.config import SQLiteConfig

__all__ = ["MODES", "measure"]

MODES = ("FULL", "NORMAL")


def measure(directory: Path, count: int) -> dict[str, object]:
    """Rates per second: ``commit_<mode>`` (bare transactions) and ``enqueue_<mode>`` (one task a call),
    and the broker's ``default`` mode."""
    result: dict[str, object] = {"default": SQLiteConfig(path="x").synchronous}
    for mode in MODES:
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            bare_us, enqueue_us = floors(mode, count, Path(tmp))
        result[f"commit_{mode}"] = 1e6 / bare_us
        result[f"enqueue_{mode}"] = 1e6 / enqueue_us
    return result


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]), int(sys.argv[2]))))
