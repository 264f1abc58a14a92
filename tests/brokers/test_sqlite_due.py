"""An idle SQLite consumer wakes when a task of its queues falls due, not at its caller's next poll.

Nothing is committed when a scheduled or retry task falls due, so no ring wakes anyone; the claim
before a wait reads when the first such task of its queues does (``ops.next_due``), and
``wait_for_work`` ends then: the next claim promotes the task and takes it at its due time.
"""

from __future__ import annotations

import time

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import NewTask, Outcome

NOW = 1_000_000.0
DUE = 0.3


def _waited_until_due(consumer: SQLiteBroker, queue: str) -> float:
    """Claim nothing from ``queue``, then wait (10 s at most); how long the wait took."""
    assert consumer.claim([queue], NOW, 30.0, 10) == []
    started = time.monotonic()
    assert consumer.wait_for_work([queue], 10.0) is True  # not the timeout
    return time.monotonic() - started


def test_a_wait_ends_when_a_scheduled_task_falls_due(consumer: SQLiteBroker, producer: SQLiteBroker) -> None:
    producer.enqueue([NewTask("later", "job", "default", "[]", run_at=NOW + DUE)], NOW)
    assert _waited_until_due(consumer, "default") >= DUE - 0.1  # (the claim before the wait began the time)
    assert [record.id for record in consumer.claim(["default"], NOW + DUE, 30.0, 10)] == ["later"]


def test_a_wait_ends_when_a_retry_falls_due(consumer: SQLiteBroker, producer: SQLiteBroker) -> None:
    producer.enqueue([NewTask("flaky", "job", "default", "[]")], NOW)
    [record] = consumer.claim(["default"], NOW, 30.0, 10)
    retry = Outcome("flaky", record.lease_token or "", "retry", error="boom", run_at=NOW + DUE)
    assert producer.settle([retry], NOW) == [True]
    assert _waited_until_due(consumer, "default") >= DUE - 0.1
    assert [record.id for record in consumer.claim(["default"], NOW + DUE, 30.0, 10)] == ["flaky"]


def test_a_task_of_another_queue_falling_due_does_not_end_the_wait(
    consumer: SQLiteBroker, producer: SQLiteBroker
) -> None:
    producer.enqueue([NewTask("elsewhere", "job", "other", "[]", run_at=NOW + 0.05)], NOW)
    assert consumer.claim(["default"], NOW, 30.0, 10) == []
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 0.3) is False
    assert time.monotonic() - started >= 0.3


def test_a_due_time_ends_one_wait_only(consumer: SQLiteBroker, producer: SQLiteBroker) -> None:
    """A caller that waits again before it claims (draining rings, say) is not woken at once forever."""
    producer.enqueue([NewTask("later", "job", "default", "[]", run_at=NOW + 0.05)], NOW)
    assert consumer.claim(["default"], NOW, 30.0, 10) == []
    assert consumer.wait_for_work(["default"], 10.0) is True
    started = time.monotonic()
    assert consumer.wait_for_work(["default"], 0.2) is False
    assert time.monotonic() - started >= 0.2
