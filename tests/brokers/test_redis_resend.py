"""An enqueue sent again after its connection broke mid-reply answers as its first send did.

The broker sends a call once more when the connection fails before the reply is read (redis-py's
retry in ``connections.py``, the cluster client's in ``cluster.py``); the first send may have run.
Each test puts a ``CuttingProxy`` between the broker and a real server, which forwards the call, lets
the server run it, and closes the connection instead of forwarding the reply: the broker sends it
again, and the second send meets what the first stored. It must answer "stored" (and the same
duplicates as the first send), never a duplicate of the call's own task; another call's task with
that id or unique key must still be one. Every test runs in layout 5 (a slot per queue: custom ids and
unique keys claimed by ``take`` first) and layout 4 (one slot, the enqueue script checks them); the
last ones on the session's 3-master cluster, where a call sent again goes another way (the node's
connection does not retry; ``ClusterCalls`` has the cluster client send it once more).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from conveyor import Conveyor
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.errors import DuplicateTask, QueueFull
from conveyor.model import Event, Outcome, QueueSettings, TaskState
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .resent import NOW, cut_on_cluster, cut_once, open_broker, pending, task

ENQUEUE, TAKE = b"_enqueue", b"_take"  # in the function names the calls carry (scripts.py)


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex


@pytest.fixture
def broker(proxy: CuttingProxy, layout: str, namespace: str) -> Iterator[RedisBroker]:
    opened = open_broker(proxy, layout, namespace)
    try:
        opened.enqueue([task(opened, "warm-up")], NOW)  # the library loaded, the queue registered
        yield opened
    finally:
        opened.close()


def test_a_one_task_enqueue_sent_again_answers_stored(proxy: CuttingProxy, broker: RedisBroker) -> None:
    new = task(broker)
    made = cut_once(proxy, ENQUEUE)
    assert broker.enqueue([new], NOW) == [None]
    made()
    record = broker.get(new.id, NOW)
    assert record is not None and record.state == TaskState.PENDING
    assert pending(broker) == 2  # the warm-up task and this one, stored once


def test_a_batch_sent_again_answers_stored(proxy: CuttingProxy, broker: RedisBroker) -> None:
    batch = [task(broker) for _ in range(3)]
    made = cut_once(proxy, ENQUEUE)
    assert broker.enqueue(batch, NOW) == [None, None, None]
    made()
    assert pending(broker) == 4


@pytest.mark.parametrize("marker", [ENQUEUE, TAKE], ids=["enqueue cut", "take cut"])
def test_a_custom_id_sent_again_answers_stored_and_stays_taken(
    proxy: CuttingProxy, broker: RedisBroker, layout: str, marker: bytes
) -> None:
    if marker == TAKE and layout == "layout 4":
        pytest.skip("layout 4 claims nothing before the enqueue")
    new = task(broker, "order-" + uuid.uuid4().hex[:8])
    made = cut_once(proxy, marker)
    assert broker.enqueue([new], NOW) == [None]
    made()
    assert broker.enqueue([replace(new, payload="[[2], {}]")], NOW) == [new.id]  # another call's: a duplicate
    assert pending(broker) == 2


@pytest.mark.parametrize("marker", [ENQUEUE, TAKE], ids=["enqueue cut", "take cut"])
def test_a_unique_key_sent_again_answers_stored_and_stays_held(
    proxy: CuttingProxy, broker: RedisBroker, layout: str, marker: bytes
) -> None:
    if marker == TAKE and layout == "layout 4":
        pytest.skip("layout 4 claims nothing before the enqueue")
    new = task(broker, unique_key="report-" + uuid.uuid4().hex[:8])
    made = cut_once(proxy, marker)
    assert broker.enqueue([new], NOW) == [None]
    made()
    assert broker.enqueue([task(broker, unique_key=new.unique_key)], NOW) == [new.id]
    assert pending(broker) == 2


def test_a_batch_sent_again_answers_the_duplicates_its_first_send_found(
    proxy: CuttingProxy, broker: RedisBroker
) -> None:
    held = task(broker, unique_key="held")
    assert broker.enqueue([held], NOW) == [None]
    batch = [task(broker), task(broker, unique_key="held"), task(broker, unique_key="fresh")]
    made = cut_once(proxy, ENQUEUE)
    assert broker.enqueue(batch, NOW) == [None, held.id, None]
    made()
    assert pending(broker) == 4


def test_a_resend_finding_the_queue_full_answers_stored(proxy: CuttingProxy, broker: RedisBroker) -> None:
    broker.configure_queue(QueueSettings("q", max_size=2))  # the warm-up task and one more
    new = task(broker)
    made = cut_once(proxy, ENQUEUE)
    assert broker.enqueue([new], NOW) == [None]
    made()
    with pytest.raises(QueueFull):
        broker.enqueue([task(broker)], NOW)


def test_a_resend_after_its_task_finished_does_not_store_it_again(
    proxy: CuttingProxy, broker: RedisBroker, redis_server: RedisServer, layout: str, namespace: str
) -> None:
    """A worker ran the task between the two sends, and no retention keeps it visible: the second
    send finds a finished, invisible task, which an enqueue of that id would replace."""
    worker = RedisBroker(
        RedisConfig.from_url(redis_server.namespace_url(namespace)),
        keys=Keys(namespace) if layout == "layout 4" else None,
    )
    new = task(broker, "once")

    ran: list[str] = []

    def run_it() -> None:
        for record in worker.claim(["q"], NOW + 1, 30.0, limit=2):
            assert worker.settle([Outcome(record.id, record.lease_token or "", "complete", keep_for=0.0)], NOW + 1)
            ran.append(record.id)

    try:
        made = cut_once(proxy, ENQUEUE, then=run_it)
        assert broker.enqueue([new], NOW + 1) == [None]
        made()
        assert "once" in ran
        assert worker.claim(["q"], NOW + 2, 30.0) == []  # not pending again: it would run twice
    finally:
        worker.close()


def test_a_resend_tells_local_subscribers_once(proxy: CuttingProxy, broker: RedisBroker) -> None:
    heard: list[Event] = []
    stop = broker.subscribe(heard.append)
    try:
        new = task(broker)
        made = cut_once(proxy, ENQUEUE)
        assert broker.enqueue([new], NOW) == [None]
        made()
        assert [(event.task_id, event.new_state) for event in heard] == [(new.id, "pending")]
    finally:
        stop()


def test_a_resent_take_still_frees_the_key_it_claimed_when_the_queue_is_full(
    proxy: CuttingProxy, broker: RedisBroker, layout: str
) -> None:
    """The take's second send answers as its first (the entry is this call's own), so the refused
    task's claim is freed at once rather than held until it is old."""
    if layout == "layout 4":
        pytest.skip("layout 4 claims nothing before the enqueue")
    broker.configure_queue(QueueSettings("q", max_size=1))
    made = cut_once(proxy, TAKE)
    with pytest.raises(QueueFull):
        broker.enqueue([task(broker, unique_key="k")], NOW)
    made()
    broker.configure_queue(QueueSettings("q", max_size=None))
    assert broker.enqueue([task(broker, unique_key="k")], NOW) == [None]


def test_a_resent_take_that_found_a_key_held_still_frees_the_key_it_claimed(
    proxy: CuttingProxy, broker: RedisBroker, layout: str
) -> None:
    """On one server the take is joined to the enqueue (``take_enqueue.lua``); where an entry is held,
    the call makes the take's writes alone and refuses with its answers, which its second send
    repeats (a kept refusal): the other key is still this call's own, so it is freed at once when the
    queue then refuses the task, rather than held until it is old."""
    if layout == "layout 4":
        pytest.skip("layout 4 claims nothing before the enqueue")
    held = task(broker, unique_key="held")
    assert broker.enqueue([held], NOW) == [None]
    broker.configure_queue(QueueSettings("q", max_size=2))  # the warm-up task and the holder
    made = cut_once(proxy, TAKE)
    with pytest.raises(QueueFull):
        broker.enqueue([task(broker, unique_key="held"), task(broker, unique_key="k")], NOW)
    made()
    broker.configure_queue(QueueSettings("q", max_size=None))
    assert broker.enqueue([task(broker, unique_key="k")], NOW) == [None]


def test_an_app_enqueue_sent_again_returns_its_handle(proxy: CuttingProxy, layout: str, namespace: str) -> None:
    url = f"redis://127.0.0.1:{proxy.port}/0?namespace={namespace}"
    app = Conveyor(url) if layout == "layout 5" else Conveyor(broker=open_broker(proxy, layout, namespace))
    try:
        app.enqueue("job", task_id="warm-up")
        made = cut_once(proxy, ENQUEUE)
        handle = app.enqueue("job", [1], task_id="invoice-42")  # no DuplicateTask for its own task
        made()
        assert handle.id == "invoice-42"
        with pytest.raises(DuplicateTask):
            app.enqueue("job", [2], task_id="invoice-42")
    finally:
        app.close()


@pytest.fixture
def cluster_broker(redis_cluster: LocalCluster, cluster_proxies: list[CuttingProxy]) -> Iterator[RedisBroker]:
    opened = RedisBroker(RedisConfig.from_url(redis_cluster.namespace_url()))
    try:
        assert opened.cluster
        opened.enqueue([task(opened, "warm-up", unique_key="warm-up")], NOW)  # every node's connections made
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize(
    ("marker", "custom", "unique"),
    [(ENQUEUE, False, False), (ENQUEUE, True, True), (TAKE, True, True)],
    ids=["generated id", "custom id and unique key", "take cut"],
)
def test_a_call_sent_again_on_a_cluster_answers_stored(
    cluster_proxies: list[CuttingProxy], cluster_broker: RedisBroker, marker: bytes, custom: bool, unique: bool
) -> None:
    broker = cluster_broker
    new = task(broker, "order-" + uuid.uuid4().hex[:8] if custom else None, "key" if unique else None)
    with cut_on_cluster(cluster_proxies, marker):
        assert broker.enqueue([new], NOW) == [None]
    again = task(broker, new.id if custom else None, new.unique_key)
    assert broker.enqueue([again], NOW) == [new.id if custom or unique else None]
    assert pending(broker) == 2 + (0 if custom or unique else 1)
