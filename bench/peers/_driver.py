"""Command line of the peer scripts (run by the harness with the peers virtualenv's python).

    _driver.py PEER produce WORKLOAD N single|bulk|warmup  -> prints {"elapsed": s, "count": n}
    _driver.py PEER worker WORKLOAD                  -> runs the peer's worker until killed
    _driver.py PEER info                             -> prints {"settings", "bulk", "mixed"}

WORKLOAD: enqueue, drain, memory (no-op tasks), io (1 ms sleeps), mixed, latency (paced).
Mode warmup sends one no-op task; the harness sends it and waits for the worker to run it before latency and mixed.
"""

import asyncio
import importlib
import inspect
import json
import os
import sys
import time

RATE = 200.0  # latency workload: tasks per second
MIXED_DELAY = 0.5  # seconds, for the 10% delayed tasks of the mixed workload


def mixed_spec(i):
    """(fail, delay, priority) of the i-th mixed task: 10% failing, 10% delayed, priorities 0-9."""
    return (i % 10 == 0, MIXED_DELAY if i % 10 == 1 else None, (i * 7) % 10)


async def _produce_async(mod, workload, n, mode):
    async with mod.AsyncProducer() as producer:
        start = time.perf_counter()
        if mode == "warmup":
            await producer.one("noop")
        elif workload == "latency":
            for i in range(n):
                target = start + i / RATE
                pause = target - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                await producer.one("noop", ts=time.time())
        elif workload == "mixed":
            for i in range(n):
                fail, delay, prio = mixed_spec(i)
                await producer.one("noop", fail=fail, delay=delay, priority=prio)
        else:
            task = "sleepy" if workload == "io" else "noop"
            if mode == "bulk":
                await producer.bulk(task, n)
            else:
                for _ in range(n):
                    await producer.one(task)
        return time.perf_counter() - start


def _produce_sync(mod, workload, n, mode):
    with mod.Producer() as producer:
        start = time.perf_counter()
        if mode == "warmup":
            producer.one("noop")
        elif workload == "latency":
            for i in range(n):
                target = start + i / RATE
                pause = target - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                producer.one("noop", ts=time.time())
        elif workload == "mixed":
            for i in range(n):
                fail, delay, prio = mixed_spec(i)
                producer.one("noop", fail=fail, delay=delay, priority=prio)
        else:
            task = "sleepy" if workload == "io" else "noop"
            if mode == "bulk":
                producer.bulk(task, n)
            else:
                for _ in range(n):
                    producer.one(task)
        return time.perf_counter() - start


def main(argv):
    peer, role = argv[1], argv[2]
    if role != "info":
        os.environ["BENCH_WORKLOAD"] = argv[3]
    mod = importlib.import_module("bench.conveyor_peer" if peer == "conveyor" else f"{peer}_peer")
    if role == "info":
        info = {
            "settings": mod.SETTINGS,
            "bulk": mod.BULK,
            "mixed": mod.MIXED,
            "io_note": getattr(mod, "IO_NOTE", None),
        }
        print(json.dumps(info))
    elif role == "produce":
        workload, n, mode = argv[3], int(argv[4]), argv[5]
        if hasattr(mod, "AsyncProducer"):
            elapsed = asyncio.run(_produce_async(mod, workload, n, mode))
        else:
            elapsed = _produce_sync(mod, workload, n, mode)
        print(json.dumps({"elapsed": elapsed, "count": n}))
    elif role == "worker":
        result = mod.run_worker()
        if inspect.iscoroutine(result):
            asyncio.run(result)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv)
