"""The upgrade from layout 4 as users run it: a namespace filled by the version before (an app on
layout 4's keys, ``Keys``), then a real ``conveyor worker`` of this version (layout 5, the default)
draining all of it while its janitor moves layout 4's tasks, and a producer of the version before
still enqueueing meanwhile. Every task runs exactly once (the worker's leases never expire here) and
its result is found by id; layout 4's keys are gone at the end."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import pytest
import redis

from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.testing import poll_until

from .procs import Spawn, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def _tasks_module(url: str, runs: str) -> str:
    """The app the worker runs: each task counts its run in the hash ``runs`` (outside the namespace)."""
    server = urlsplit(url)._replace(query="").geturl()
    return textwrap.dedent(
        f"""
        import redis

        from conveyor import Conveyor

        app = Conveyor({url!r})
        counts = redis.Redis.from_url({server!r})


        @app.task(name="job")
        def job(n: int) -> int:
            counts.hincrby({runs!r}, str(n), 1)
            return n * 2
        """
    )


@pytest.mark.timeout(300)
def test_a_worker_of_this_version_drains_a_namespace_layout_4_filled_while_it_moves(
    tmp_path: Path, spawn: Spawn, redis_url: str
) -> None:
    config = RedisConfig.from_url(redis_url)
    runs = f"test-runs:{config.namespace}"
    (tmp_path / "upgrade_tasks.py").write_text(_tasks_module(redis_url, runs))
    old = Conveyor(broker=RedisBroker(config, keys=Keys(config.namespace)))
    job = old.task(name="job")(lambda n: n * 2)
    client = redis.Redis.from_url(urlsplit(redis_url)._replace(query="").geturl(), decode_responses=True)
    try:
        ids = [h.id for h in job.enqueue_many([((n,), {}) for n in range(6000)])]
        ids += [job.enqueue(6000 + n).id for n in range(20)]
        ids.append(old.enqueue("job", [7000], task_id="order-7000").id)  # a custom id
        ids.append(old.enqueue("job", [7001], delay=1.0).id)  # scheduled
        ids.append(old.enqueue("job", [7002], unique_key="u", unique_for=600).id)  # a unique key
        assert Keys(config.namespace).queues in client.keys("*")
        env = clean_env(redis_url) | {"CONVEYOR_WORKER_JANITOR_INTERVAL": "0.3"}  # a move at every tick
        worker = spawn(["worker", "upgrade_tasks:app", "--concurrency", "20"], env=env, cwd=tmp_path)
        for n in range(7100, 7400, 20):  # the version before still enqueues while the move runs
            ids += [h.id for h in job.enqueue_many([((m,), {}) for m in range(n, n + 20)])]
        new = Conveyor(redis_url)
        try:
            poll_until(lambda: client.hlen(runs) == len(ids), timeout=120, message=lambda: f"{client.hlen(runs)} ran")
            counted = {int(n): int(count) for n, count in client.hgetall(runs).items()}
            assert set(counted.values()) == {1}, "a task ran twice"
            assert [new.get(task_id).result for task_id in ids] == [2 * n for n in sorted(counted)]

            # the janitor's next tick, once layout 4 is empty, deletes its last keys, but for those that
            # expire by themselves: the answers its enqueues kept for a repeat (keys.Slot.sent) and the
            # per-minute counts of tasks settled before they moved (not carried over)
            def left() -> list[str]:
                found = cast("list[str]", client.keys("{" + config.namespace + "}:v4:*"))
                return [key for key in found if not ((":v4:sent:" in key or ":v4:h:" in key) and client.ttl(key) > 0)]

            poll_until(lambda: not left(), timeout=30, message=lambda: f"layout 4's keys gone: {left()[:5]}")
        finally:
            new.close()
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert [line for line in (out + err).splitlines() if " ERROR " in line or "Traceback" in line] == []
    finally:
        client.delete(runs)
        client.close()
        old.close()
