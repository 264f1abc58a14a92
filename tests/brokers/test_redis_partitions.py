"""A queue of ``partitions=N`` spread over N queue slots (issue 33; docs/architecture.md, "Partitions"):
with split slots (``SplitKeys``) on one server and on the 3-master cluster, and what layout 4 (one
slot) keeps of it."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, FakeClock, QueueFull, Retry, TaskState
from conveyor.brokers.redis import RedisBroker, spread
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import SLOTS, Keys, keyslot, partition_labels
from conveyor.model import QueueSettings
from conveyor.testing import poll_until
from conveyor.testing.redis_server import RedisServer

from .split import PerSlotBroker, SplitKeys, blocked_pops, url_of


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def _app(url: str | RedisConfig, clock: FakeClock, split: bool = True) -> Conveyor:
    config = RedisConfig.from_url(url) if isinstance(url, str) else url
    keys = SplitKeys(config.namespace) if split else Keys(config.namespace)
    application = Conveyor(broker=RedisBroker(config, keys=keys), clock=clock)

    failed: set[int] = set()

    @application.task(name="job")
    def job(n: int, fail: bool = False) -> int:
        if fail and n not in failed:  # once
            failed.add(n)
            raise Retry(delay=60)
        return n * 2

    return application


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def app(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Conveyor]:
    """An app whose broker gives each queue (each partition) a slot of its own."""
    url = url_of(request)
    application = _app(url, clock)
    try:
        yield application
    finally:
        application.close()


def _broker(app: Conveyor) -> RedisBroker:
    assert isinstance(app.broker, RedisBroker)
    return app.broker


def _label(task_id: str) -> str:
    return task_id.rpartition("~")[2]


def _rows(app: Conveyor, label: str) -> int:
    broker = _broker(app)
    return int(broker.client.hlen(broker.keys.slot(broker.keys.label_prefix(label)).rows))


def _partitioned(app: Conveyor, queue: str, partitions: int) -> None:
    """``configure_queue`` of a new queue, and its one slot (retired, empty) dropped at once: the steady
    state, as a worker's promoter leaves it a few seconds later (``spread.GRACE``)."""
    app.configure_queue(queue, partitions=partitions)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spread, "GRACE", -1000.0)
        assert _broker(app)._drop_retired() == 1


def test_partitions_sit_in_evenly_spaced_slot_windows() -> None:
    labels = partition_labels("ns", "hot", 6)
    assert labels[0].startswith("hot|") and len(set(labels)) == 6
    for n, label in enumerate(labels):
        assert n * SLOTS // 6 <= keyslot("{ns|" + label + "}") < (n + 1) * SLOTS // 6
    assert partition_labels("ns", "hot", 1) == ["hot"]


def test_generated_ids_name_the_partitions_in_rotation(app: Conveyor) -> None:
    app.configure_queue("hot", partitions=3)
    ids = [app.enqueue("job", [n], queue="hot").id for n in range(6)]
    labels = partition_labels(_broker(app).keys.namespace, "hot", 3)
    assert all(re.fullmatch(r"[0-9a-f]{32}~hot\|[0-9a-z]+", task_id) for task_id in ids)
    assert [_label(task_id) for task_id in ids[3:]] == [_label(task_id) for task_id in ids[:3]]
    assert sorted(_label(task_id) for task_id in ids) == sorted(labels * 2)
    # a small batch goes whole to the next partition in the rotation, the next batch to the one after
    batches = [[h.id for h in app.enqueue_many("job", [([n], {}) for n in range(6)], queue="hot")] for _ in range(3)]
    assert [len({_label(task_id) for task_id in batch}) for batch in batches] == [1, 1, 1]
    first = labels.index(_label(ids[0]))
    assert [_label(batch[0]) for batch in batches] == [labels[(first + 6 + k) % 3] for k in range(3)]
    assert [_rows(app, label) for label in labels] == [8, 8, 8]
    custom = app.enqueue("job", [9], queue="hot", task_id="order-7").id
    assert app.get(custom).result is None and app.get(ids[0]).queue == "hot"


def test_a_batch_goes_to_as_few_partitions_as_its_calls_need_and_batches_cover_them_all(app: Conveyor) -> None:
    """A batch of B tasks into a queue of N partitions: ``ceil(B / ENQUEUE_CHUNK)`` partitions (at
    most N), in even runs, the next ones in the rotation; a queue with ``max_size`` keeps one task
    per partition in turn, since a partition's share of the limit would meet the batch alone."""
    app.configure_queue("hot", partitions=6)
    labels = partition_labels(_broker(app).keys.namespace, "hot", 6)
    calls: list[tuple[list[int], dict[str, int]]] = [([n], {}) for n in range(1200)]  # 500 a call: 3 of 400
    seen: list[str] = []
    for _ in range(2):
        batch = [_label(handle.id) for handle in app.enqueue_many("job", calls, queue="hot")]
        runs = [label for n, label in enumerate(batch) if n == 0 or batch[n - 1] != label]
        assert len(runs) == 3 and all(batch.count(label) == 400 for label in runs), runs
        seen += runs
    assert sorted(seen) == sorted(labels)  # the second batch took the other three
    first = labels.index(seen[0])
    assert seen == [labels[(first + k) % 6] for k in range(6)]
    assert [_rows(app, label) for label in labels] == [400] * 6
    assert len({_label(h.id) for h in app.enqueue_many("job", calls[:500], queue="hot")}) == 1
    assert len({_label(h.id) for h in app.enqueue_many("job", calls[:501], queue="hot")}) == 2
    assert len({_label(h.id) for h in app.enqueue_many("job", calls * 3, queue="hot")}) == 6
    app.configure_queue("full", max_size=600, partitions=6)
    assert sorted(_label(h.id) for h in app.enqueue_many("job", calls[:12], queue="full")) == sorted(
        partition_labels(_broker(app).keys.namespace, "full", 6) * 2
    )


def test_processes_that_enqueue_one_task_each_do_not_all_pick_the_first_partition(
    server: RedisServer, clock: FakeClock
) -> None:
    """Each broker object starts its rotation at a random place (12 of them all on one of 3
    partitions by chance: 3 / 3**12, about 6 in a million)."""
    first = _app(server.url, clock)
    first.configure_queue("hot", partitions=3)
    first.close()
    labels = set()
    for _ in range(12):
        app = _app(server.url, clock)
        try:
            labels.add(_label(app.enqueue("job", [1], queue="hot").id))
        finally:
            app.close()
    assert len(labels) > 1


def test_claims_start_at_the_next_partition_so_none_starves(app: Conveyor) -> None:
    _partitioned(app, "hot", 3)
    for n in range(15):
        app.enqueue("job", [n], queue="hot")
    claimed = [app.claim(["hot"]) for _ in range(3)]
    assert len({_label(lease.task.id) for lease in claimed if lease is not None}) == 3


def test_claims_try_the_partitions_found_dry_last_for_a_while(
    server: RedisServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call per partition, as on a cluster: a batch sits in one partition, and the claims after the
    first go there first rather than pass the empty ones (a call each); a partition found dry that
    gets work comes back into the rotation once ``DRY_FOR`` is over, and meanwhile when the others
    leave a claim unfilled."""
    config = RedisConfig.from_url(server.url)
    app = Conveyor(broker=PerSlotBroker(config, keys=SplitKeys(config.namespace)), clock=clock)
    app.task(name="job")(lambda n: n)
    try:
        _partitioned(app, "hot", 6)
        broker = _broker(app)

        def calls() -> int:
            return int(broker.client.info("commandstats")["cmdstat_fcall"]["calls"])

        def claim() -> str | None:
            records = broker.claim(["hot"], clock(), 60.0, limit=1)
            return records[0].id if records else None

        batch = [h.id for h in app.enqueue_many("job", [([n], {}) for n in range(24)], queue="hot")]
        assert len({_label(task_id) for task_id in batch}) == 1
        before = calls()
        assert sorted(claim() or "" for _ in range(24)) == sorted(batch)
        assert calls() - before <= 24 + 5  # the empty partitions passed once; in rotation, 24 + 60
        assert claim() is None  # every partition dry now
        big = [h.id for h in app.enqueue_many("job", [([n], {}) for n in range(12)], queue="hot")]
        first = claim()
        assert first in big  # its partition found to have work: first in the claims from now on
        late = app.enqueue_many("job", [([1], {})], queue="hot")[0].id  # the next partition, found dry
        assert _label(late) != _label(first)
        got = [claim() for _ in range(12)]
        assert set(got[:11]) == set(big) - {first} and got[11] == late
        monkeypatch.setattr(spread, "DRY_FOR", 0.0)  # over: the rotation as it was
        again = [h.id for h in app.enqueue_many("job", [([n], {}) for n in range(12)], queue="hot")]
        other = app.enqueue_many("job", [([1], {})], queue="hot")[0].id
        got = [claim() for _ in range(6)]
        assert other in got  # each partition the start of one of six claims
        while (task_id := claim()) is not None:
            got.append(task_id)
        assert sorted(map(str, got)) == sorted([*again, other])
    finally:
        app.close()


def test_a_claim_filled_in_one_partition_leaves_the_next_ones_upkeep_to_their_turn(
    app: Conveyor, clock: FakeClock
) -> None:
    """On one server as on a cluster: a claim reaps a partition's expired leases when it reaches it,
    and the next claim starts at the next partition, reaping it first."""
    app.configure_queue("hot", partitions=2)
    ids = [app.enqueue("job", [n], queue="hot").id for n in range(2)]
    assert len({_label(task_id) for task_id in ids}) == 2
    broker, now = _broker(app), clock()
    assert len(broker.claim(["hot"], now, 5.0, limit=2)) == 2
    later = now + 10.0  # both leases expired
    again = broker.claim(["hot"], later, 5.0, limit=1)
    assert len(again) == 1 and again[0].id in ids
    other = next(task_id for task_id in ids if task_id != again[0].id)
    record = broker.get(other, later)
    assert record is not None and record.state is TaskState.ACTIVE  # not reaped yet: not its turn
    assert [record.id for record in broker.claim(["hot"], later, 5.0, limit=1)] == [other]


def test_a_claim_passing_idle_partitions_reads_and_promotes_any_ones_due_task(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim skips a later partition's upkeep where it has nothing to do, but not a task due later
    (its due time is read for the idle wait) or due by now (promoted and claimed). Claims turn two
    partitions a round and ids one, so the delayed task is met at every place in the claim's order."""
    app.configure_queue("hot", partitions=3)
    broker = _broker(app)
    noted: list[float | None] = []
    monkeypatch.setattr(broker._dues, "claimed", lambda due, ran_at, present: noted.append(due))
    for n in range(3):
        task_id = app.enqueue("job", [n], queue="hot", delay=30).id
        assert broker.claim(["hot"], clock(), 60.0, limit=1) == []
        assert noted[-1] == pytest.approx(clock() + 30.0)
        clock.advance(31)
        assert [record.id for record in broker.claim(["hot"], clock(), 3600.0, limit=1)] == [task_id]


def _next_turn(broker: RedisBroker, what: str, label: str) -> None:
    """Make the next claim (``what`` "claim") or generated id ("id") of ``hot`` take its partition
    ``label`` (each turns one partition a call)."""
    turns: dict[str, int] = broker.__dict__.setdefault("_turns", {})
    turns[what + " hot"] = broker._spreads()["hot"].visited.index(label)


def _two_partitions(app: Conveyor) -> tuple[RedisBroker, str, str]:
    """``hot`` in 2 partitions: the broker and the two labels."""
    app.configure_queue("hot", partitions=2)
    broker = _broker(app)
    first, second = partition_labels(broker.keys.namespace, "hot", 2)
    return broker, first, second


def _enqueued_in(app: Conveyor, label: str, delay: float | None = None, expires: float | None = None) -> str:
    """The id of a task enqueued into ``hot``'s partition ``label``."""
    _next_turn(_broker(app), "id", label)
    task_id = app.enqueue("job", [1], queue="hot", delay=delay, expires=expires).id
    assert _label(task_id) == label
    return task_id


def test_a_claim_reaching_a_later_partition_reaps_an_expired_lease_before_a_live_one(
    app: Conveyor, clock: FakeClock
) -> None:
    """A claim passes a later partition without its upkeep only where the first entries of its sorted
    sets show nothing past; one whose earliest lease expired, a live lease after it, gets its turn:
    the expired lease is reaped and its task claimed, after an earlier partition holding only a live
    lease was passed."""
    broker, early, late = _two_partitions(app)
    expired, live = _enqueued_in(app, late), _enqueued_in(app, late)
    held = _enqueued_in(app, early)
    for task_id, lease_for in ((expired, 5.0), (live, 3600.0), (held, 3600.0)):
        _next_turn(broker, "claim", _label(task_id))
        assert [record.id for record in broker.claim(["hot"], clock(), lease_for, limit=1)] == [task_id]
    clock.advance(10)
    _next_turn(broker, "claim", early)
    assert [record.id for record in broker.claim(["hot"], clock(), 60.0, limit=1)] == [expired]
    for task_id in (live, held):
        record = broker.get(task_id, clock())
        assert record is not None and record.state is TaskState.ACTIVE


def test_a_claim_reaching_a_later_partition_expires_a_task_past_its_deadline_not_yet_due(
    app: Conveyor, clock: FakeClock
) -> None:
    """A scheduled task due in an hour whose deadline passed: the first entry of the partition's
    `due` says nothing is due, that of `expiring` that a deadline passed: a claim reaching it expires
    the task, as the partition's upkeep always did, and notes no due time for it."""
    broker, early, late = _two_partitions(app)
    task_id = _enqueued_in(app, late, delay=3600, expires=5)
    clock.advance(10)
    _next_turn(broker, "claim", early)
    assert broker.claim(["hot"], clock(), 60.0, limit=1) == []
    record = broker.get(task_id, clock())
    assert record is not None and record.state is TaskState.ARCHIVED


def test_a_claim_takes_a_pending_task_from_a_later_partition_holding_a_live_lease(
    app: Conveyor, clock: FakeClock
) -> None:
    """A later partition's live lease and due-later task account for fewer of its keys than exist:
    its `pending` is there too, and the claim takes its task."""
    broker, early, late = _two_partitions(app)
    leased, later = _enqueued_in(app, late), _enqueued_in(app, late, delay=3600)
    _next_turn(broker, "claim", late)
    assert [record.id for record in broker.claim(["hot"], clock(), 3600.0, limit=1)] == [leased]
    waiting = _enqueued_in(app, late)
    _next_turn(broker, "claim", early)
    assert [record.id for record in broker.claim(["hot"], clock(), 60.0, limit=1)] == [waiting]
    record = broker.get(later, clock())
    assert record is not None and record.state is TaskState.SCHEDULED


def test_a_claim_filled_in_a_partition_still_gives_the_next_queues_slot_its_upkeep_first(
    server: RedisServer, clock: FakeClock
) -> None:
    """On one server only a later partition of a queue waits for its turn: the slot of a queue named
    after it gets its upkeep before the claim, as in a claim of plain queues (the differential
    test's contract; on a cluster each slot is a call of its own, made while the claim has room)."""
    app = _app(server.url, clock)
    try:
        broker, early, _ = _two_partitions(app)
        plain = app.enqueue("job", [1], queue="plain").id
        assert [record.id for record in broker.claim(["plain"], clock(), 5.0, limit=1)] == [plain]
        task_id = _enqueued_in(app, early)
        clock.advance(10)
        _next_turn(broker, "claim", early)
        assert [record.id for record in broker.claim(["hot", "plain"], clock(), 60.0, limit=1)] == [task_id]
        record = broker.get(plain, clock())
        assert record is not None and record.state is TaskState.PENDING  # its lease reaped
    finally:
        app.close()


def test_max_size_and_concurrency_hold_per_partition_as_shares(app: Conveyor) -> None:
    app.configure_queue("hot", max_size=5, concurrency=4, partitions=2)
    info = app.inspect.queue("hot")
    assert (info.settings.max_size, info.settings.concurrency, info.settings.partitions) == (5, 4, 2)
    for n in range(6):  # ceil(5 / 2) = 3 per partition, in rotation
        app.enqueue("job", [n], queue="hot")
    with pytest.raises(QueueFull) as refused:
        app.enqueue("job", [7], queue="hot")
    # the queue's own max_size, not the share of the partition that refused
    assert (refused.value.queue, refused.value.max_size) == ("hot", 5)
    assert "max_size=5" in str(refused.value), refused.value
    with pytest.raises(QueueFull) as refused:
        app.enqueue_many("job", [([8], {}), ([9], {})], queue="hot")
    assert refused.value.max_size == 5, refused.value
    broker = _broker(app)
    records = broker.claim(["hot"], app.now(), 60.0, limit=10)
    assert len(records) == 4  # ceil(4 / 2) = 2 active per partition
    assert sorted(_label(record.id) for record in records) == sorted(
        partition_labels(broker.keys.namespace, "hot", 2) * 2
    )


def test_a_retired_partition_keeps_its_own_share_in_a_claim_over_every_partition(app: Conveyor) -> None:
    """Lowered from 3 partitions to 2, the retired one keeps the share it had (concurrency 1), the
    active ones hold the new share (2): one claim over all of them holds each to its own. On one
    server that claim is one call over the partitions' slots, which read the first partition's
    settings for all of them."""
    app.configure_queue("hot", concurrency=3, partitions=3)  # 1 active per partition
    for n in range(9):  # 3 per partition, in rotation
        app.enqueue("job", [n], queue="hot")
    app.configure_queue("hot", concurrency=4, partitions=2)  # 2 per active partition
    for n in range(4):  # 2 in each active partition, which may be new
        app.enqueue("job", [n], queue="hot")
    broker = _broker(app)
    active = partition_labels(broker.keys.namespace, "hot", 2)
    retired = set(partition_labels(broker.keys.namespace, "hot", 3)) - set(active)
    assert retired
    records = broker.claim(["hot"], app.now(), 60.0, limit=20)
    claimed = {label: 0 for label in (*active, *retired)}
    for record in records:
        claimed[_label(record.id)] += 1
    assert claimed == {label: 2 if label in active else 1 for label in claimed}


def test_a_pause_reaches_every_partition(app: Conveyor) -> None:
    app.configure_queue("hot", partitions=4)
    app.inspect.pause("hot")
    for n in range(8):
        app.enqueue("job", [n], queue="hot")
    assert app.claim(["hot"]) is None
    app.configure_queue("hot", partitions=6)  # new partitions start paused
    assert app.claim(["hot"]) is None and app.inspect.queue("hot").settings.paused
    app.inspect.resume("hot")
    assert app.worker(queues=["hot"]).run_until_idle() == 8


def test_every_partitions_slot_is_followed(app: Conveyor) -> None:
    _partitioned(app, "hot", 4)
    app.enqueue("job", [1], queue="plain")
    broker = _broker(app)
    wanted = {broker.keys.label_prefix(label) for label in partition_labels(broker.keys.namespace, "hot", 4)}
    assert set(broker._slots_now()) == wanted | {broker.keys.queue_prefix("plain")}


def test_changing_partitions_strands_no_task_in_any_state(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lowered, then raised, with tasks scheduled, pending, active, retrying and completed in every
    partition: every task is found by id, run and settled; the retired partitions are dropped once
    empty and past the grace, not before."""
    app.configure_queue("hot", partitions=6)
    done = [app.enqueue("job", [n], queue="hot").id for n in range(6)]
    assert app.worker(queues=["hot"]).run_until_idle() == 6
    retrying = [app.enqueue("job", [n], {"fail": True}, queue="hot").id for n in range(6)]
    assert app.worker(queues=["hot"]).run_until_idle() == 6
    later = [app.enqueue("job", [n], queue="hot", delay=30).id for n in range(6)]
    waiting = [app.enqueue("job", [n], queue="hot").id for n in range(6)]
    active = [lease for lease in (app.claim(["hot"]) for _ in range(3)) if lease is not None]
    assert len(active) == 3 and not any(lease.task.id in later for lease in active)
    app.configure_queue("hot", partitions=2)
    stats = app.inspect.queue("hot")
    assert stats.settings.partitions == 2 and stats.counts["total"] == 24
    waiting += [app.enqueue("job", [n], queue="hot").id for n in range(4)]
    app.configure_queue("hot", partitions=5)
    monkeypatch.setattr(spread, "GRACE", -1000.0)  # every retired partition old enough
    assert _broker(app)._drop_retired() == 1  # the queue's one slot, empty (partitioned before any task)
    assert _broker(app)._drop_retired() == 0  # the partitions of 6 still hold tasks
    for lease in active:
        lease.complete(None)
    clock.advance(61)
    assert app.worker(queues=["hot"]).run_until_idle() == 6 + 6 + 7  # retried, scheduled, pending
    assert all(app.get(task_id).state is TaskState.COMPLETED for task_id in done + retrying + later + waiting)
    assert app.inspect.queue("hot").counts["completed"] == 28
    for task_id in done + retrying + later + waiting:  # the active ones were of the waiting
        app.inspect.delete(task_id)
    broker = _broker(app)
    assert broker._drop_retired() > 0
    wanted = {broker.keys.label_prefix(label) for label in partition_labels(broker.keys.namespace, "hot", 5)}
    assert set(broker._slots_now()) == wanted


def test_partitioning_a_queue_that_holds_tasks_strands_none_of_them(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue never partitioned keeps its tasks in its one slot; raising ``partitions`` retires that
    slot like any partition: its tasks are counted, listed and claimed, and it is dropped once empty."""
    whole = [app.enqueue("job", [n], queue="hot").id for n in range(5)]
    later = [app.enqueue("job", [n], queue="hot", delay=30).id for n in range(2)]
    app.configure_queue("hot", partitions=4)
    info = app.inspect.queue("hot")
    assert (info.counts["pending"], info.counts["scheduled"], info.counts["total"]) == (5, 2, 7)
    assert {task.id for task in app.inspect.list("hot", TaskState.PENDING)} == set(whole)
    spread_ids = [app.enqueue("job", [n], queue="hot").id for n in range(8)]
    assert {_label(task_id) for task_id in spread_ids} == set(partition_labels(_broker(app).keys.namespace, "hot", 4))
    clock.advance(31)
    assert app.worker(queues=["hot"]).run_until_idle() == 15
    assert all(app.get(task_id).state is TaskState.COMPLETED for task_id in whole + later + spread_ids)
    for task_id in whole + later:
        app.inspect.delete(task_id)
    monkeypatch.setattr(spread, "GRACE", -1000.0)  # every retired partition old enough
    broker = _broker(app)
    assert broker._drop_retired() == 1  # the queue's one slot, now empty
    wanted = {broker.keys.label_prefix(label) for label in partition_labels(broker.keys.namespace, "hot", 4)}
    assert set(broker._slots_now()) == wanted


def test_an_id_of_a_partition_the_queue_has_not_is_refused(app: Conveyor) -> None:
    app.configure_queue("hot", partitions=2)
    with pytest.raises(ValueError, match="partition"):
        app.enqueue("job", [1], queue="hot", task_id="0" * 32 + "~hot|zzzz")


def test_layout_4_keeps_a_partitioned_queue_whole_in_its_one_slot(server: RedisServer, clock: FakeClock) -> None:
    app = _app(server.url, clock, split=False)
    try:
        app.configure_queue("hot", max_size=5, partitions=4)
        ids = [app.enqueue("job", [n], queue="hot").id for n in range(5)]
        assert all(re.fullmatch(r"[0-9a-f]{32}", task_id) for task_id in ids)
        info = app.inspect.queue("hot")
        assert (info.settings.partitions, info.settings.max_size, info.counts["pending"]) == (4, 5, 5)
        broker = _broker(app)
        assert broker._slots_now() == [broker.keys.prefix]
        assert all(key.startswith(broker.keys.prefix) for key in broker.client.scan_iter(match="*"))
    finally:
        app.close()


def test_layout_4_forgets_a_partitioned_queues_count_and_limits_with_it(server: RedisServer, clock: FakeClock) -> None:
    """Its one slot's settings went, but the count and limits ``parts`` reports stayed: the queue came
    back reporting max_size 5 and 3 partitions while enforcing neither."""
    app = _app(server.url, clock, split=False)
    try:
        app.configure_queue("hot", max_size=5, concurrency=2, partitions=3)
        app.inspect.delete_queue("hot")
        for n in range(8):  # past the old max_size
            app.enqueue("job", [n], queue="hot")
        assert app.inspect.queue("hot").settings == QueueSettings("hot")
    finally:
        app.close()


def test_a_partitioned_queue_is_forgotten_only_when_every_partition_is_empty(app: Conveyor) -> None:
    app.configure_queue("hot", max_size=8, partitions=3)
    app.inspect.pause("hot")
    task_id = app.enqueue("job", [1], queue="hot").id
    assert _broker(app).forget_queue("hot") == 1
    info = app.inspect.queue("hot")  # still listed, every partition's settings kept
    assert (info.settings.max_size, info.settings.paused, info.settings.partitions) == (8, True, 3)
    assert app.enqueue("job", [2], queue="hot") and app.enqueue("job", [3], queue="hot")  # the two others
    assert all(app.claim(["hot"]) is None for _ in range(3))  # each partition still paused
    app.inspect.delete(task_id)
    app.inspect.purge("hot", TaskState.PENDING)
    assert _broker(app).forget_queue("hot") == 0
    assert "hot" not in app.stats()
    assert _broker(app).forget_queue("hot") is None


def test_history_sums_the_executions_of_every_partition(app: Conveyor) -> None:
    app.configure_queue("hot", partitions=3)
    for n in range(6):
        app.enqueue("job", [n], queue="hot")
    assert app.worker(queues=["hot"]).run_until_idle() == 6
    assert sum(minute.completed for minute in app.inspect.history("hot", minutes=5)) == 6


def test_events_of_every_partition_reach_a_listener_of_another_process(app: Conveyor, clock: FakeClock) -> None:
    """The listener follows every partition's slot (``_slots_now``): events made by another broker
    object in each partition are heard."""
    app.configure_queue("hot", partitions=3)
    heard: list[str] = []
    stop = app.on_state_change(lambda task_id, old, new: heard.append(task_id) if old is None else None)
    broker = _broker(app)
    listening = [broker.keys.slot(prefix).listening for prefix in broker._queue_prefixes("hot")]
    poll_until(lambda: all(broker.client.exists(key) for key in listening), timeout=10.0, message="listening")
    other = _app(broker.config, clock)
    try:
        made = {other.enqueue("job", [n], queue="hot").id for n in range(6)}
        assert len({_label(task_id) for task_id in made}) == 3
        poll_until(lambda: made <= set(heard), timeout=10.0, message="every partition's events")
    finally:
        stop()
        other.close()


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def live_app(request: pytest.FixtureRequest) -> Iterator[Conveyor]:
    """An app on split slots with the server's clock: an idle worker's wait and claim go in one write."""
    config = RedisConfig.from_url(url_of(request))
    application = Conveyor(broker=RedisBroker(config, keys=SplitKeys(config.namespace)))
    application.task(name="job")(lambda n: n)
    try:
        yield application
    finally:
        application.close()


def test_a_worker_that_went_idle_runs_what_arrives_in_every_partition(live_app: Conveyor) -> None:
    """An idle worker blocks on the ``wake`` list of every partition at once (one ``BLPOP`` on one
    server; on the cluster one per slot, sent together: ``slotwaits.py``), so a task arriving in any
    of them starts at once, long before its wait's end (5 s here). Before, the wait named the queue's
    own slot, which a partition's enqueue does not push to, and on the cluster one slot at a time:
    such a task started when the wait ran out."""
    live_app.configure_queue("hot", partitions=3)
    broker = _broker(live_app)
    base = blocked_pops(broker)
    worker = live_app.worker(queues=["hot"], poll_interval=5.0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        poll_until(lambda: live_app.inspect.workers(), timeout=10.0, message="the worker's registration")
        labels = set()
        for n in range(6):  # generated ids go to the partitions in turn: each twice
            poll_until(lambda: blocked_pops(broker) > base, timeout=10.0, message="the idle worker's wait")
            sent = time.monotonic()
            task_id = live_app.enqueue("job", [n], queue="hot").id
            labels.add(_label(task_id))
            done = lambda: live_app.get(task_id).state is TaskState.COMPLETED  # noqa: B023, E731
            poll_until(done, timeout=10.0, message=f"the task in {_label(task_id)} completed")
            assert time.monotonic() - sent < 1.0, f"a task in {_label(task_id)} ran {time.monotonic() - sent:.2f}s late"
        assert len(labels) == 3
    finally:
        worker.stop()
        thread.join(timeout=30.0)


def test_listing_and_purging_go_partition_after_partition(app: Conveyor) -> None:
    app.configure_queue("hot", partitions=3)
    ids = {app.enqueue("job", [n], queue="hot").id for n in range(9)}
    pages = [app.inspect.list("hot", "pending", offset=offset, limit=4) for offset in (0, 4, 8)]
    assert [len(page) for page in pages] == [4, 4, 1]
    assert {info.id for page in pages for info in page} == ids
    assert app.inspect.purge("hot", TaskState.PENDING, limit=5) == 5
    assert app.inspect.purge("hot", TaskState.PENDING) == 4


def test_a_partition_retired_again_while_being_dropped_stays_listed(
    app: Conveyor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop reads the partitions, checks the retired ones are empty, then deletes their fields:
    a change of N in between that made one active (a task went in) and retired it again must not
    leave it unlisted. Run here as if both changes came between the read and the delete."""
    monkeypatch.setattr(spread, "GRACE", -1000.0)
    app.configure_queue("hot", partitions=3)
    app.configure_queue("hot", partitions=2)
    broker = _broker(app)
    before = broker._spreads(fresh=True)  # the drop's read: the 3-partition labels retired
    empty = broker._empty_retired(before)  # and found empty
    assert empty
    app.configure_queue("hot", partitions=3)
    ids = [app.enqueue("job", [n], queue="hot").id for n in range(3)]
    app.configure_queue("hot", partitions=2)
    assert broker._drop(before, empty) == 0
    assert all(app.get(task_id) is not None for task_id in ids)
    assert app.worker(queues=["hot"]).run_until_idle() == 3
