"""An idle Redis waiter wakes when a scheduled or retry task of its queues' slots falls due.

A claim that takes fewer tasks than it asks for reads the slot's first due time (``claim.lua``); the
next wait ends then (``dues.py``), once. A task scheduled or retried to fall due within a minute
pushes the slot's ``wake`` token, so a waiter reads its due time; one due later pushes nothing.
Each wait is given 3 s: the old code returned at that timeout, seconds past the due time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.dues import TICK
from conveyor.brokers.redis.keys import Keys, Keys5
from conveyor.model import BrokerPolicy, NewTask, Outcome, TaskRecord
from conveyor.testing import poll_until

TIMEOUT = 3.0
#: Late by more than this, the wait ran to its timeout (or the host stalled for that long).
BOUND = 0.3


@pytest.fixture(params=["layout 4", "layout 5", "layout 5, cluster"])
def broker(request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    cluster = request.param.endswith("cluster")
    url = str(request.getfixturevalue("redis_cluster_url" if cluster else "redis_url"))
    config = RedisConfig.from_url(url)
    keys = Keys(config.namespace) if request.param == "layout 4" else Keys5(config.namespace)
    made = RedisBroker(config, BrokerPolicy(), keys=keys)
    yield made
    made.close()


def new_task(task_id: str, queue: str = "a", run_at: float | None = None) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]", run_at=run_at)


def wake_key(broker: RedisBroker, queue: str) -> str:
    keys = broker.keys
    return keys.wake if keys.one_slot else keys.slot(keys.queue_prefix(queue)).wake


def wake_tokens(broker: RedisBroker, queue: str) -> int:
    return int(broker.client.llen(wake_key(broker, queue)))


def claim_when_due(broker: RedisBroker, queues: list[str]) -> tuple[list[TaskRecord], float]:
    """Idle waits of ``TIMEOUT`` each until one claims a task: it, and when it returned."""
    clock = broker.server_clock()
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        claimed = broker.claim_after_wait(queues, clock, 30.0, 1, TIMEOUT)
        if claimed:
            return claimed, clock()
    raise AssertionError("nothing claimed within 10 s")


def test_an_idle_claim_returns_when_a_delayed_task_falls_due(broker: RedisBroker) -> None:
    clock = broker.server_clock()
    broker.claim(["a", "b"], clock(), 30.0, 1)
    due = clock() + 0.7
    broker.enqueue([new_task("t1", "b", run_at=due)], clock())
    claimed, at = claim_when_due(broker, ["a", "b"])
    assert [record.id for record in claimed] == ["t1"]
    assert due <= at < due + BOUND


def test_an_idle_claim_returns_when_a_retry_falls_due(broker: RedisBroker) -> None:
    clock = broker.server_clock()
    broker.enqueue([new_task("t1")], clock())
    (record,) = broker.claim(["a"], clock(), 30.0, 1)
    due = clock() + 0.5
    outcome = Outcome(task_id="t1", token=record.lease_token or "", kind="retry", run_at=due, error="boom")
    assert broker.settle([outcome], clock()) == [True]
    claimed, at = claim_when_due(broker, ["a"])
    assert [(rec.id, rec.attempts) for rec in claimed] == [("t1", 2)]
    assert due <= at < due + BOUND


def test_a_due_time_ends_one_wait_only(broker: RedisBroker) -> None:
    clock = broker.server_clock()
    due = clock() + 1.0  # far enough for the claim below to come first on a busy machine
    broker.enqueue([new_task("t1", run_at=due)], clock())
    assert broker.wait_for_work(["a"], 0.01)  # the token the enqueue pushed
    assert broker.claim(["a"], clock(), 30.0, 1) == []  # reads the due time
    assert broker.wait_for_work(["a"], TIMEOUT)  # a server tick early at most (dues.py: TICK)
    assert due - TICK - 0.01 <= clock() < due + BOUND
    started = time.monotonic()
    assert not broker.wait_for_work(["a"], 0.2)  # nobody claimed since: no due time to end this one
    assert time.monotonic() - started >= 0.19


def test_a_due_time_one_thread_read_ends_another_threads_wait(broker: RedisBroker) -> None:
    """A worker's claimers take turns at waiting: the waiter's own last claim may not be the one that
    read the due time."""
    clock = broker.server_clock()
    due = clock() + 0.5
    broker.enqueue([new_task("t1", run_at=due)], clock())
    assert broker.wait_for_work(["a"], 0.01)  # the token the enqueue pushed
    claimer = threading.Thread(target=broker.claim, args=(["a"], clock(), 30.0, 1))
    claimer.start()
    claimer.join()
    assert broker.wait_for_work(["a"], TIMEOUT)
    assert due - TICK - 0.01 <= clock() < due + BOUND


def test_only_a_task_due_within_a_minute_pushes_the_wake_token(broker: RedisBroker) -> None:
    clock = broker.server_clock()
    broker.enqueue([new_task("later", run_at=clock() + 3600)], clock())
    assert wake_tokens(broker, "a") == 0
    broker.enqueue([new_task("soon", run_at=clock() + 30)], clock())
    assert wake_tokens(broker, "a") == 1


def test_a_claim_on_a_fake_clock_ends_no_real_wait(broker: RedisBroker) -> None:
    """A FakeClock's time does not pass in real time: a due time read at it is no real deadline."""
    now = 1_000_000.0
    broker.enqueue([new_task("t1", run_at=now + 0.1)], now)
    broker.client.delete(wake_key(broker, "a"))
    assert broker.claim(["a"], now, 30.0, 1) == []
    started = time.monotonic()
    assert not broker.wait_for_work(["a"], 0.3)
    assert time.monotonic() - started >= 0.29
    poll_until(lambda: broker.claim(["a"], now + 1, 30.0, 1), timeout=5.0, message="the task to be claimed")
