"""Generated ids carrying their queue's label, ``<id>~<label>`` (issue 33): where every queue has a slot
of its own (``SplitKeys``), the app appends the label the broker routes by (``LabelsIds``), and every
call by id alone finds the task's slot from it. In layout 4 ids stay 32 hex digits (``test_ids.py``)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import cast

import pytest

from conveyor import Conveyor, FakeClock, TaskState
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import queue_label
from conveyor.testing.redis_server import RedisServer

from .split import SplitKeys, url_of

LONG = "q" * 40  # a queue name too long to be its own label


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def app(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Conveyor]:
    """An app whose broker gives each queue a slot of its own (on the cluster: spread over masters)."""
    url = url_of(request)
    config = RedisConfig.from_url(url)
    application = Conveyor(broker=RedisBroker(config, keys=SplitKeys(config.namespace)), clock=clock)
    application.task(name="job")(lambda n: n * 2)
    try:
        yield application
    finally:
        application.close()


def test_a_generated_id_ends_in_its_queues_label(app: Conveyor) -> None:
    assert queue_label("default") == "default" and re.fullmatch(r"[0-9a-f]{10}", queue_label(LONG))
    one = app.enqueue("job", [1]).id
    assert re.fullmatch(r"[0-9a-f]{32}~default", one), one
    assert app.enqueue("job", [2], queue=LONG).id.endswith("~" + queue_label(LONG))
    many = app.enqueue_many("job", [([n], {}) for n in range(3)], queue="b")
    assert all(re.fullmatch(r"[0-9a-f]{32}~b", handle.id) for handle in many)
    assert app.enqueue("job", [3], task_id="order-42", queue="b").id == "order-42"  # custom ids as given


def test_a_labelled_id_given_again_goes_only_to_its_queue(app: Conveyor) -> None:
    """An id the app made, enqueued again as ``task_id`` (after its task is gone): into its own queue,
    where calls by id find it; another queue's would store it where none would."""
    made = app.enqueue("job", [1], queue="a").id
    app.inspect.delete(made)
    with pytest.raises(ValueError, match="cannot go to queue 'b': the text after '~' names the queue"):
        app.enqueue("job", [1], task_id=made, queue="b")
    assert app.enqueue("job", [1], task_id=made, queue="a").id == made
    assert app.get(made).queue == "a"


def test_tasks_are_found_run_and_settled_by_id_alone(app: Conveyor) -> None:
    """Generated ids by the label they carry, custom ids by their entry in the namespace slot."""
    ids = [app.enqueue("job", [n], queue=queue).id for n, queue in enumerate(["a", LONG, "a"])]
    ids.append(app.enqueue("job", [3], queue=LONG, task_id="order-42").id)
    assert [app.get(task_id).queue for task_id in ids] == ["a", LONG, "a", LONG]
    worker = app.worker(queues=[LONG, "a"])
    while worker.process_next():
        pass
    assert [app.get(task_id).state for task_id in ids] == [TaskState.COMPLETED] * 4
    assert app.get(ids[1]).result == 2 and app.get("order-42").result == 6
    assert app.inspect.get(ids[0]).id == ids[0]  # the id check takes ~<label>
    app.inspect.delete(ids[0])
    app.inspect.delete("order-42")
    assert {name: counts["total"] for name, counts in app.stats().items()} == {"a": 1, LONG: 1}


def test_an_idle_worker_waits_on_the_wake_lists_of_every_slot_of_its_queues(app: Conveyor) -> None:
    """Queues in two slots (on the cluster, on two masters, which refuse one ``BLPOP`` over both):
    a token left by an enqueue into the second is found at once, and a claim after the wait, at the
    server's clock, takes the task of whichever slot has one."""
    broker = cast("RedisBroker", app.broker)
    assert broker.keys.queue_prefix("a") != broker.keys.queue_prefix("b")
    assert not broker.wait_for_work(["a", "b"], 0.1)
    first = app.enqueue("job", [1], queue="b")
    started = time.monotonic()
    assert broker.wait_for_work(["a", "b"], 10.0)
    assert time.monotonic() - started < 2.0  # not after a's slice of the timeout (5 s)
    second = app.enqueue("job", [2], queue="b")
    claimed = broker.claim_after_wait(["a", "b"], broker.server_clock(), 30.0, 2, 10.0)
    assert [record.id for record in claimed] == [first.id, second.id]
    assert broker.claim_after_wait(["a", "b"], broker.server_clock(), 30.0, 1, 0.1) == []
