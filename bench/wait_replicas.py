"""The price of ``wait_replicas=1`` on Redis: ``python -m bench.wait_replicas``.

On a private master with one replica (``conveyor.testing.sentinel.ReplicaSet``, loopback: the
replica's acknowledgement costs a local round trip, far less than across a network), per mode
(``wait_replicas`` 0 and 1, alternating within each repetition so a slow phase of the shared machine
weighs on both alike): ``enqueue`` one task per call, ``enqueue`` in batches of 500 (one ``WAIT`` per
chunk), and a claim + settle per task (each followed by ``WAIT`` with the option on). Each mode runs in
a fresh namespace. Options: ``--tasks N``, ``--reps N``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from conveyor.brokers.redis import RedisBroker
from conveyor.model import BrokerPolicy, NewTask, Outcome
from conveyor.testing.sentinel import ReplicaSet

MODES = ("0", "1")


def _tasks(prefix: str, count: int) -> list[NewTask]:
    return [NewTask(id=f"{prefix}{i}", name="job", queue="q", payload="[[], {}]") for i in range(count)]


def run_mode(url: str, tasks: int) -> dict[str, float]:
    """Tasks per second for the three phases on a fresh namespace of ``url``."""
    broker = RedisBroker.from_url(url, BrokerPolicy())
    try:
        started = time.perf_counter()
        for task in _tasks("one", tasks):
            broker.enqueue([task], time.time())
        one = tasks / (time.perf_counter() - started)
        batch = _tasks("many", tasks)
        started = time.perf_counter()
        for start in range(0, tasks, 500):
            broker.enqueue(batch[start : start + 500], time.time())
        many = tasks / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(tasks):
            (record,) = broker.claim(["q"], time.time(), 60.0)
            broker.settle([Outcome(record.id, record.lease_token or "", "complete", result="1")], time.time())
        cycle = tasks / (time.perf_counter() - started)
    finally:
        broker.close()
    return {"enqueue one per call": one, "enqueue 500 per call": many, "claim + settle": cycle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    with ReplicaSet(replicas=1) as servers:
        for rep in range(args.reps):
            rates = {
                mode: run_mode(f"{servers.master.url}?namespace=b{uuid.uuid4().hex}&wait_replicas={mode}", args.tasks)
                for mode in MODES
            }
            print(f"repetition {rep + 1}: tasks/s (wait_replicas=1 / 0)")
            for phase, off in rates["0"].items():
                on = rates["1"][phase]
                ratios.setdefault(phase, []).append(on / off)
                print(f"  {phase:<22}off {off:>9,.0f}   on {on:>9,.0f}   ({on / off:.2f}x)")
    print(f"median wait_replicas=1 / 0 over {args.reps} repetitions of {args.tasks} tasks:")
    for phase, values in ratios.items():
        print(f"  {phase:<22}{statistics.median(values):.2f}x  (range {min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
