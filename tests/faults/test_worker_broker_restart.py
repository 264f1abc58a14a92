"""Real worker processes survive a Redis crash and restart under load: they back off, reconnect on
their own, and every acknowledged enqueue completes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apps.harness import Cluster

from conveyor import Conveyor, TaskState
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer

pytestmark = pytest.mark.slow

TASKS = 400


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(appendonly=True, directory=tmp_path / "data") as running:  # appendfsync always
        yield running


def test_workers_recover_alone_after_the_server_crashes_and_restarts(server: RedisServer, tmp_path: Path) -> None:
    url = server.namespace_url() + "&socket_timeout=1&socket_connect_timeout=0.5"
    producer = Conveyor(url)
    cluster = Cluster(url, tmp_path)
    try:
        workers = [cluster.spawn("--concurrency", "4"), cluster.spawn("--concurrency", "4")]
        handles = [producer.enqueue("work", args=[f"k{i}", 0.005]) for i in range(TASKS)]

        def logs() -> str:
            return "".join(cluster.log_of(proc) for proc in workers)

        poll_until(
            lambda: len(cluster.entries("done")) >= TASKS // 4, timeout=30, message="a quarter of the tasks done"
        )

        server.kill()  # SIGKILL: only what the AOF holds survives
        poll_until(lambda: "retrying in" in logs(), timeout=30, message="the workers to notice the outage and back off")
        server.start()  # same port, same data directory
        restarted = time.monotonic()

        def all_completed() -> bool:
            return producer.stats()["default"]["completed"] == TASKS

        poll_until(all_completed, timeout=60, message="every acknowledged task completed after the restart")
        recovery = time.monotonic() - restarted
        assert all(proc.poll() is None for proc in workers), "a worker died instead of reconnecting"
        done = {entry.key for entry in cluster.entries("done")}
        assert done == {f"k{i}" for i in range(TASKS)}
        assert all(producer.get(h.id).state is TaskState.COMPLETED for h in handles)
        assert recovery < 30  # lease 2 s + backoff (<= 5 s) + reaper: far below this bound
        assert "Traceback" not in logs()  # an outage is one warning line per try, not a stack trace
    finally:
        cluster.stop_all()
        producer.close()
