"""The Redis broker under real processes: several consumers, and a server crash under load.

Consumers are separate Python processes (``python -c WORKER``) that claim in batches, record every
execution in a ledger file, and settle. They use the broker directly (worker-runtime faults are tested
elsewhere). Every process started here is stopped by PID.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.errors import BrokerUnavailable
from conveyor.model import BrokerPolicy, NewTask, TaskState
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.redis]

# argv: url, ledger path, stop file, lease seconds. Runs until the stop file exists and no task is left.
WORKER = r"""
import os, sys, time
from conveyor.brokers.redis import RedisBroker
from conveyor.errors import BrokerUnavailable
from conveyor.model import BrokerPolicy, Outcome
url, ledger_path, stop_path, lease = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
broker = RedisBroker.from_url(url, BrokerPolicy(max_stalls=100))
with open(ledger_path, "a", buffering=1) as ledger:
    while True:
        try:
            claimed = broker.claim(["q"], time.time(), lease, limit=200)
            if not claimed:
                if os.path.exists(stop_path):
                    break
                broker.reap(time.time())
                broker.wait_for_work(["q"], 0.2)
                continue
            ledger.write("".join(f"{r.id}\n" for r in claimed))
            broker.settle([Outcome(r.id, r.lease_token, "complete") for r in claimed], time.time())
        except BrokerUnavailable:
            time.sleep(0.1)
broker.close()
"""


def start_workers(url: str, tmp_path: Path, count: int, lease: float) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(tmp_path / f"ledger{i}"), str(tmp_path / "stop"), str(lease)],
        )
        for i in range(count)
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]], tmp_path: Path, timeout: float) -> None:
    (tmp_path / "stop").touch()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [0] * len(procs)


def ledger(tmp_path: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for path in tmp_path.glob("ledger*"):
        counts.update(path.read_text().split())
    return counts


def wait_drained(broker: RedisBroker, timeout: float) -> None:
    def drained() -> bool:
        try:
            (info,) = broker.queues(time.time())
        except BrokerUnavailable:
            return False
        return info.counts["pending"] + info.counts["active"] + info.counts["scheduled"] == 0

    poll_until(drained, timeout=timeout, interval=0.1, message="the queue to drain")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(appendonly=True, directory=tmp_path / "data") as running:
        yield running


def test_four_processes_complete_each_of_80k_tasks_exactly_once(redis_server: RedisServer, tmp_path: Path) -> None:
    url = redis_server.namespace_url()
    broker = RedisBroker.from_url(url, BrokerPolicy())
    ids = [f"t{i}" for i in range(80_000)]
    procs = start_workers(url, tmp_path, 4, lease=120.0)
    try:
        assert broker.enqueue([NewTask(id=i, name="job", queue="q", payload="[]") for i in ids], time.time()) == [
            None
        ] * len(ids)
        wait_drained(broker, timeout=240)
    finally:
        stop_workers(procs, tmp_path, timeout=30)
    executions = ledger(tmp_path)
    assert set(executions) == set(ids)
    assert max(executions.values()) == 1
    (info,) = broker.queues(time.time())
    assert info.counts["completed"] == len(ids)
    broker.close()


def test_every_acknowledged_enqueue_completes_across_a_server_crash(server: RedisServer, tmp_path: Path) -> None:
    url = server.namespace_url() + "&socket_timeout=2&socket_connect_timeout=0.5"
    broker = RedisBroker.from_url(url, BrokerPolicy())
    acknowledged: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            task = NewTask(id=f"p{i}", name="job", queue="q", payload="[]")
            try:
                broker.enqueue([task], time.time())
            except BrokerUnavailable:
                time.sleep(0.02)
                continue  # not acknowledged: the same id is sent again (a duplicate if it was stored)
            acknowledged.append(task.id)
            i += 1

    procs = start_workers(url, tmp_path, 2, lease=3.0)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        poll_until(lambda: len(acknowledged) >= 2000, timeout=60, interval=0.05, message="2000 acknowledged")
        server.restart(crash=True)  # SIGKILL: only what the AOF (appendfsync always) holds survives
        before = len(acknowledged)
        poll_until(lambda: len(acknowledged) >= before + 2000, timeout=60, interval=0.05, message="2000 more")
    finally:
        stop.set()
        producer.join()
    try:
        wait_drained(broker, timeout=120)
    finally:
        stop_workers(procs, tmp_path, timeout=30)
    now = time.time()
    states = {task_id: getattr(broker.get(task_id, now), "state", None) for task_id in acknowledged}
    assert [task_id for task_id, state in states.items() if state is not TaskState.COMPLETED] == []
    assert set(acknowledged) <= set(ledger(tmp_path))
    broker.close()
