"""Fault tests of the worker runtime: real processes, real signals, a ledger the handlers append to.

Leases are short (lease 2 s, heartbeat 0.5 s, reaper 0.5 s). Each test runs against SQLite and Redis.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from apps.harness import HEARTBEAT, LEASE, REAPER, Cluster
from apps.policies import Linear

from conveyor import ArchiveReason, Conveyor, TaskHandle, TaskState
from conveyor.testing import poll_until
from conveyor.worker.supervisor import CANCEL_GRACE

pytestmark = pytest.mark.slow

# A lease is renewed at most 1.5 heartbeats before a pause starts (the heartbeat skips leases renewed
# less than half an interval ago), so a pause under LEASE - 1.5 * HEARTBEAT must not cost the lease.
PAUSE_BOUND = LEASE - 1.5 * HEARTBEAT


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'faults.db'}"
    redis_url: str = request.getfixturevalue("redis_url")
    return redis_url


@pytest.fixture
def cluster(url: str, tmp_path: Path) -> Iterator[Cluster]:
    group = Cluster(url, tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def app(url: str) -> Iterator[Conveyor]:
    producer = Conveyor(url)
    try:
        yield producer
    finally:
        producer.close()


def live_workers(app: Conveyor, count: int) -> None:
    poll_until(lambda: len(app.broker.workers(app.now())) >= count, timeout=15, message=f"{count} worker(s) registered")


def test_sigkill_mid_task_runs_it_again_elsewhere(cluster: Cluster, app: Conveyor) -> None:
    cluster.spawn()
    cluster.spawn()
    live_workers(app, 2)
    handle = app.enqueue("work", args=["k", 1.0])
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="first start")
    victim = cluster.entries("start", "k")[0].pid
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    cluster.proc(victim).wait(5)
    poll_until(lambda: len(cluster.entries("start", "k")) == 2, timeout=10, message="second start")
    recovery = cluster.entries("start", "k")[1].at - killed_at
    poll_until(lambda: handle.status().state is TaskState.COMPLETED, timeout=10, message="completed")
    assert handle.status().result != victim
    assert recovery <= LEASE + REAPER + 1.0, f"recovered in {recovery:.2f} s"
    print(f"recovery after SIGKILL: {recovery:.2f} s")  # noqa: T201 - reported with -s


def test_killed_after_return_before_ack_completes_with_at_most_one_duplicate(cluster: Cluster, app: Conveyor) -> None:
    for _ in range(2):
        cluster.spawn("--middleware", "apps.ledger_app:kill_after_return")
    live_workers(app, 2)
    handle = app.enqueue("work", args=["k", 0.0])
    poll_until(lambda: handle.status().state is TaskState.COMPLETED, timeout=15, message="completed")
    assert len(cluster.entries("returned")) == 1  # the first execution returned, then its process died
    assert len(cluster.entries("done", "k")) == 2  # so it ran exactly twice: one duplicate
    assert handle.status().attempts == 2


def test_middleware_given_by_reference_runs_in_supervised_children(cluster: Cluster, app: Conveyor) -> None:
    cluster.spawn("--processes", "2", "--concurrency", "1", "--middleware", "apps.ledger_app:kill_after_return")
    handle = app.enqueue("work", args=["k", 0.0])
    poll_until(lambda: handle.status().state is TaskState.COMPLETED, timeout=20, message="completed")
    assert len(cluster.entries("returned")) == 1  # the middleware ran in a child, which it then killed
    assert len(cluster.entries("done", "k")) == 2
    assert handle.status().attempts == 2


def test_sigstop_past_the_lease_lets_another_worker_finish_and_fences_the_stale_ack(
    cluster: Cluster, app: Conveyor
) -> None:
    cluster.spawn()
    cluster.spawn()
    live_workers(app, 2)
    handle = app.enqueue("work", args=["k", 1.0])
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="first start")
    paused = cluster.entries("start", "k")[0].pid
    os.kill(paused, signal.SIGSTOP)
    stopped_at = time.monotonic()
    poll_until(
        lambda: handle.status().state is TaskState.COMPLETED, timeout=3 * LEASE, message="completed by the other worker"
    )
    winner = handle.status().result
    assert winner != paused
    time.sleep(max(0.0, 3 * LEASE - (time.monotonic() - stopped_at)))  # the pause itself is the fault
    os.kill(paused, signal.SIGCONT)
    proc = cluster.proc(paused)
    poll_until(lambda: "result discarded" in cluster.log_of(proc), timeout=10, message="stale ack rejected")
    assert [e.pid for e in cluster.entries("done", "k")].count(paused) == 1  # it did finish its handler
    assert handle.status().result == winner  # ... and changed nothing


def test_sigstop_shorter_than_the_lease_causes_no_redelivery(cluster: Cluster, app: Conveyor) -> None:
    cluster.spawn()
    cluster.spawn()
    live_workers(app, 2)
    handle = app.enqueue("work", args=["k", 0.5])
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="start")
    paused = cluster.entries("start", "k")[0].pid
    os.kill(paused, signal.SIGSTOP)
    pause_until = time.monotonic() + PAUSE_BOUND - 0.5  # 0.75 s, with 0.5 s to spare
    poll_until(
        lambda: time.monotonic() >= pause_until or len(cluster.entries("start", "k")) > 1, timeout=5, message="pause"
    )
    os.kill(paused, signal.SIGCONT)
    poll_until(lambda: handle.status().state is TaskState.COMPLETED, timeout=10, message="completed")
    assert len(cluster.entries("start", "k")) == 1
    assert handle.status().attempts == 1
    assert handle.status().result == paused


def test_sigterm_with_a_short_grace_puts_the_task_back_in_pending(cluster: Cluster, app: Conveyor) -> None:
    proc = cluster.spawn(grace=0.3)
    live_workers(app, 1)
    handle = app.enqueue("work", args=["k", 30.0])
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="start")
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    exited_at = time.time()
    poll_until(lambda: handle.status().state is TaskState.PENDING, timeout=1.0, message="pending within 1 s of exit")
    back_at = time.time()
    assert handle.status().attempts == 0
    assert proc.returncode == 0
    print(f"pending {back_at - exited_at:.3f} s after exit")  # noqa: T201


def test_a_task_that_kills_its_worker_is_archived_poison_while_others_flow(url: str, tmp_path: Path) -> None:
    cluster = Cluster(url, tmp_path, max_stalls=2)
    producer = Conveyor(url)
    try:
        cluster.spawn("--processes", "2", "--concurrency", "1")
        live_workers(producer, 2)
        poison = producer.enqueue("crash", args=["p"])
        others = [producer.enqueue("work", args=[f"ok{i}", 0.05]) for i in range(20)]
        poll_until(lambda: poison.status().state is TaskState.ARCHIVED, timeout=20, message="poison archived")
        assert poison.status().archive_reason is ArchiveReason.POISON
        assert len(cluster.entries("start", "p")) == 2
        poll_until(
            lambda: all(h.status().state is TaskState.COMPLETED for h in others), timeout=20, message="others completed"
        )
    finally:
        cluster.stop_all()
        producer.close()


def test_process_mode_kills_a_child_past_the_task_timeout(cluster: Cluster, app: Conveyor) -> None:
    cluster.spawn("--processes", "2", "--concurrency", "1")
    live_workers(app, 2)
    handle = app.enqueue("work", args=["k", 30.0], timeout=0.5, max_retries=0)
    poll_until(lambda: handle.status().state is TaskState.ARCHIVED, timeout=10, message="archived")
    assert (handle.status().last_error or "").startswith("TaskTimeout")
    assert handle.status().archive_reason is ArchiveReason.FAILED
    assert cluster.entries("done", "k") == []
    quick = app.enqueue("work", args=["q", 0.0])  # the child was replaced
    poll_until(lambda: quick.status().state is TaskState.COMPLETED, timeout=15, message="replacement child serves")


def test_custom_backoff_given_at_enqueue_sets_the_waits_of_a_worker_process(cluster: Cluster, app: Conveyor) -> None:
    """The producer (this process) and the worker process both import the registered policy; each
    retry's wait (next run minus the failure's time) follows it, not the task's registered Fixed(5)."""
    cluster.spawn()
    live_workers(app, 1)
    handle = app.enqueue("refuse", args=["k"], backoff=Linear(step=1000.0), max_retries=2)
    waits = []
    for failures in (1, 2):
        poll_until(partial(_has_failed, handle, failures), timeout=15, message=f"failure {failures}")
        info = handle.status()
        assert info.state is TaskState.RETRY and info.next_run_at is not None
        waits.append(info.next_run_at - info.errors[-1].at)
        app.inspect.run_now(handle.id)
    poll_until(lambda: handle.status().state is TaskState.ARCHIVED, timeout=15, message="archived")
    assert waits == pytest.approx([1000.0, 2000.0], abs=2.0)
    assert handle.status().archive_reason is ArchiveReason.FAILED
    assert len(cluster.entries("start", "k")) == 3


def _has_failed(handle: TaskHandle[None], times: int) -> bool:
    return len(handle.status().errors) == times


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_process_mode_stops_and_replaces_the_child_running_a_cancelled_sync_task(
    cluster: Cluster, app: Conveyor
) -> None:
    supervisor = cluster.spawn("--processes", "1", "--concurrency", "1")
    live_workers(app, 1)
    handle = app.enqueue("work", args=["k", 60.0])  # sleeps on: only stopping its process ends it
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="start")
    child = cluster.entries("start", "k")[0].pid
    assert handle.cancel() is TaskState.ARCHIVED
    cancelled_at = time.monotonic()
    poll_until(lambda: not alive(child), timeout=1.5 * HEARTBEAT + 2 * CANCEL_GRACE + 3.0, message="the child stopped")
    stopped_in = time.monotonic() - cancelled_at
    quick = app.enqueue("work", args=["q", 0.0])
    poll_until(lambda: quick.status().state is TaskState.COMPLETED, timeout=15, message="the replacement child serves")
    assert quick.status().result != child
    assert cluster.entries("done", "k") == []
    info = handle.status()
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED)
    assert "still runs cancelled" in cluster.log_of(supervisor)
    print(f"child stopped {stopped_in:.2f} s after the cancel")  # noqa: T201 - reported with -s


@pytest.mark.parametrize("task", ["polite", "waits"], ids=["sync-cooperative", "async"])
def test_process_mode_leaves_the_child_alone_when_a_cancelled_handler_stops_in_time(
    cluster: Cluster, app: Conveyor, task: str
) -> None:
    supervisor = cluster.spawn("--processes", "1", "--concurrency", "1")
    live_workers(app, 1)
    handle = app.enqueue(task, args=["k", 60.0])
    poll_until(lambda: bool(cluster.entries("start", "k")), timeout=10, message="start")
    child = cluster.entries("start", "k")[0].pid
    handle.cancel()
    poll_until(
        lambda: bool(cluster.entries("stopped", "k")), timeout=1.5 * HEARTBEAT + 3.0, message="the handler stopped"
    )
    quick = app.enqueue("work", args=["q", 0.0])
    poll_until(lambda: quick.status().state is TaskState.COMPLETED, timeout=15, message="the same child serves on")
    assert quick.status().result == child
    info = handle.status()
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.CANCELLED)
    assert "still runs cancelled" not in cluster.log_of(supervisor)
