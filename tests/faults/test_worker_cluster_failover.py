"""Real worker processes on a Redis Cluster through a master's failover, with ``wait_replicas=1``.

3 masters with a replica each; two worker processes drain thousands of tasks over several queues while
a producer thread keeps enqueueing; the master holding most of the namespace's keys is SIGKILLed
mid-drain. Its replica takes over (the cluster's own failover), the old master is started again and
rejoins as the new master's replica. Every task whose enqueue was acknowledged completes, and the
workers carry on without being restarted. The time to recover, from the SIGKILL to the completion of
the first task enqueued after it (so both the producer and a worker reached the new master), is printed
(``-s`` shows it; docs/reliability.md quotes it).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from apps.harness import Cluster as Workers

from conveyor import Conveyor
from conveyor.errors import BrokerUnavailable, ReplicationTimeout
from conveyor.testing import poll_until
from conveyor.testing.redis_cluster import ClusterNode, LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.redis]

QUEUES = ("q1", "q2", "q3", "q4")
BACKLOG = 2000  # enqueued before the workers start, spread over QUEUES


def _keys(node: ClusterNode, namespace: str) -> int:
    client = node.client()
    try:
        return sum(1 for _ in client.scan_iter(match=f"*{namespace}*", count=1000))
    finally:
        client.close()


def test_workers_lose_no_acknowledged_task_when_a_master_fails_over(tmp_path: Path) -> None:
    with LocalCluster(masters=3, replicas=1, node_timeout=1.0) as cluster:
        namespace = "t" + uuid.uuid4().hex
        url = (
            f"{cluster.url}?namespace={namespace}&wait_replicas=1&wait_timeout=500"
            "&socket_timeout=1&socket_connect_timeout=0.5"
        )
        producer = Conveyor(url)
        workers = Workers(url, tmp_path)
        acknowledged: list[str] = []
        acknowledged_at: dict[str, float] = {}
        refused = {"unavailable": 0, "short": 0}
        stop = threading.Event()

        def produce() -> None:  # one task at a time, so each acknowledgement is one task's
            count = 0
            while not stop.is_set():
                key = f"live{count}"
                count += 1
                try:
                    producer.enqueue("work", args=[key, 0.0], queue=QUEUES[count % len(QUEUES)])
                except BrokerUnavailable:
                    refused["unavailable"] += 1
                    time.sleep(0.05)  # the producer's own backoff while the cluster elects a master
                    continue
                except ReplicationTimeout:
                    refused["short"] += 1  # withdrawn: not acknowledged, not expected to run
                    continue
                acknowledged_at[key] = time.time()
                acknowledged.append(key)

        thread = threading.Thread(target=produce)
        try:
            for queue in QUEUES:
                producer.enqueue_many(
                    "work", [([f"{queue}-{i}", 0.0], {}) for i in range(BACKLOG // len(QUEUES))], queue=queue
                )
            acknowledged += [f"{queue}-{i}" for queue in QUEUES for i in range(BACKLOG // len(QUEUES))]
            procs = [workers.spawn("--queues", ",".join(QUEUES), "--concurrency", "4") for _ in range(2)]
            thread.start()
            poll_until(lambda: len(workers.entries("done")) >= BACKLOG // 4, timeout=60, message="a quarter done")

            victim = max(cluster.masters, key=lambda master: _keys(master, namespace))
            (replica,) = cluster.replicas_of[cluster.masters.index(victim)]
            victim.kill()  # SIGKILL: what it had not sent its replica is gone (wait_replicas: nothing acknowledged)
            killed_at = time.time()

            def promoted() -> bool:
                return replica.info("replication").get("role") == "master"

            poll_until(promoted, timeout=30, message="the replica to take over")
            victim.start()  # same port and node table: it rejoins as the new master's replica

            def following() -> bool:
                try:
                    return victim.info("replication").get("master_link_status") == "up"
                except redis.RedisError:
                    return False

            poll_until(following, timeout=30, message="the old master to follow the new one")

            def after_kill() -> list[float]:
                done = workers.entries("done")
                return [entry.at for entry in done if acknowledged_at.get(entry.key, 0.0) > killed_at]

            poll_until(lambda: bool(after_kill()), timeout=30, message="a task enqueued after the kill completed")
            recovered = min(after_kill()) - killed_at
            done_by_then = len(acknowledged)
            poll_until(lambda: len(acknowledged) > done_by_then + 50, timeout=30, message="enqueues acknowledged again")
            stop.set()
            thread.join()

            expected = set(acknowledged)

            def all_done() -> bool:
                return expected <= {entry.key for entry in workers.entries("done")}

            poll_until(all_done, timeout=120, message="every acknowledged task completed")
            assert all(proc.poll() is None for proc in procs), "a worker died instead of carrying on"
            logs = "".join(workers.log_of(proc) for proc in procs)
            assert "Traceback" not in logs
            print(  # noqa: T201 - the figure this test reports
                f"cluster failover: a task enqueued after the SIGKILL completed {recovered:.2f} s after it; "
                f"{len(expected)} acknowledged tasks all completed; producer refused {refused['unavailable']} "
                f"time(s) (BrokerUnavailable) and {refused['short']} (ReplicationTimeout) meanwhile"
            )
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
            workers.stop_all()
            producer.close()
