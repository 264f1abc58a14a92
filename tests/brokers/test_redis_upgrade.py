"""Layout 4's data under a broker on layout 5's keys (``upgrade.py``, ``upgrade.lua``).

Layout 4's broker writes tasks in every state (plain ids, as it makes them: none carries a label);
then a broker on layout 5's keys serves them where they are, on one server and on the 3-master
cluster (by id, by claim, in stats, by unique key and custom id), and moves them (on one server a
call per batch; on the cluster, or on one server made to, copy then drop), between its batches and
after it serving them the same: a task read by id is the same record throughout, and a mover killed
between its steps loses nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import closing
from typing import Any, cast

import pytest

from conveyor import Conveyor, FakeClock, QueueFull
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys, Keys5, queue_label
from conveyor.brokers.redis.scripts import Arg
from conveyor.model import NewTask, Outcome, QueueSettings, TaskRecord, TaskState
from conveyor.testing.redis_server import RedisServer

NOW = 1_000_000.0


def new(task_id: str, queue: str, **fields: object) -> NewTask:
    return NewTask(id=task_id, name="job", queue=queue, payload="[[], {}]", **fields)  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def pair(url: str) -> Iterator[tuple[RedisBroker, RedisBroker]]:
    config = RedisConfig.from_url(url)
    old, new_broker = (
        RedisBroker(config, keys=Keys(config.namespace)),
        RedisBroker(config, keys=Keys5(config.namespace)),
    )
    try:
        yield old, new_broker
    finally:
        old.close()
        new_broker.close()


@pytest.fixture
def brokers(server: RedisServer) -> Iterator[tuple[RedisBroker, RedisBroker]]:
    """Layout 4's broker (what runs today) and layout 5's, on one namespace of one server."""
    yield from pair(server.url)


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.slow)])
def anywhere(request: pytest.FixtureRequest) -> Iterator[tuple[RedisBroker, RedisBroker]]:
    """:func:`brokers` on one server, or on the cluster (a fresh namespace)."""
    if request.param == "cluster":
        yield from pair(str(request.getfixturevalue("redis_cluster_url")))
    else:
        yield from pair(request.getfixturevalue("server").url)


def write_every_state(old: RedisBroker) -> dict[str, TaskState]:
    """Tasks in every state, written by layout 4's broker: their ids and states."""
    old.configure_queue(QueueSettings("a", max_size=100, aging=1.0))
    old.configure_queue(QueueSettings("idle", concurrency=3))  # settings, no task
    # pending: one enqueue call's group, with priority and a deadline, a unique key, a custom id
    assert old.enqueue([new("p1", "a"), new("p2", "a"), new("p3", "b")], NOW) == [None] * 3
    assert old.enqueue([new("p4", "a", priority=5, expires_at=NOW + 10**6)], NOW) == [None]
    assert old.enqueue([new("u1", "b", unique_key="k", unique_until=NOW + 10**6)], NOW) == [None]
    assert old.enqueue([new("order-42", "b")], NOW) == [None]
    assert old.enqueue([new("s1", "a", run_at=NOW + 1000)], NOW) == [None]  # scheduled
    assert old.enqueue([new(f"{name}", "c") for name in ("done", "again", "dead", "busy")], NOW) == [None] * 4
    claimed = {record.id: record for record in old.claim(["c"], NOW, 30.0, limit=4)}
    outcomes = [
        Outcome("done", claimed["done"].lease_token or "", "complete", result='"ok"'),
        Outcome("again", claimed["again"].lease_token or "", "retry", error="E1", run_at=NOW + 500, traceback="tb"),
        Outcome("dead", claimed["dead"].lease_token or "", "archive", error="E2"),
    ]
    assert old.settle(outcomes, NOW) == [True] * 3
    return {
        **dict.fromkeys(("p1", "p2", "p3", "p4", "u1", "order-42"), TaskState.PENDING),
        "s1": TaskState.SCHEDULED,
        "done": TaskState.COMPLETED,
        "again": TaskState.RETRY,
        "dead": TaskState.ARCHIVED,
        "busy": TaskState.ACTIVE,
    }


def records(broker: RedisBroker, ids: list[str]) -> dict[str, TaskRecord | None]:
    return {task_id: broker.get(task_id, NOW) for task_id in ids}


def old_keys(broker: RedisBroker) -> list[str]:
    """Layout 4's keys but its per-minute history (which expires by itself, a day on) and the answers
    its enqueues keep for a repeat (which expire a minute on)."""
    found = broker.client.scan_iter(match="{" + broker.keys.namespace + "}:v4:*")
    return sorted(key for key in map(str, found) if ":v4:h:" not in key and ":v4:sent:" not in key)


def moving(broker: RedisBroker) -> bool:
    """Whether layout 4's registry is still there (the move deletes it last)."""
    return bool(broker.client.exists("{" + broker.keys.namespace + "}:v4:queues"))


def counts(broker: RedisBroker) -> dict[str, dict[str, int]]:
    return {info.name: info.counts for info in broker.queues(NOW)}


def test_every_task_of_layout_4_is_the_same_record_before_during_and_after_the_move(
    brokers: tuple[RedisBroker, RedisBroker],
) -> None:
    old, broker = brokers
    states = write_every_state(old)
    ids = sorted(states)
    before = records(old, ids)
    stats = counts(old)
    assert {task_id: record.state for task_id, record in before.items() if record} == states
    assert records(broker, ids) == before  # served in place: no entry in ids, so layout 4's slot
    assert counts(broker) == stats
    pending = [record.id for record in old.list_tasks("a", TaskState.PENDING, NOW)]
    assert broker._upgrade is not None
    moved = 0
    for _ in range(100):
        if not moving(broker):
            break
        step = broker._upgrade.step(NOW, budget=0.0, batch=3)  # one call of at most 3 tasks
        assert step <= 3
        moved += step
        assert records(broker, ids) == before
        assert counts(broker) == stats
        listed = [record.id for record in broker.list_tasks("a", TaskState.PENDING, NOW)]
        assert sorted(listed) == sorted(pending)  # layout 5's first, then layout 4's
        pages = [broker.list_tasks("a", TaskState.PENDING, NOW, offset=n, limit=1) for n in range(len(pending))]
        assert [page[0].id for page in pages] == listed
    assert moved == len(ids)
    assert old_keys(broker) == []
    assert records(broker, ids) == before
    assert broker.client.hget(broker.keys.ids, "order-42") == "b " + repr(NOW)  # an entry for every id
    assert broker.client.hget(broker.keys.uniq, "k") == "u1 " + repr(NOW)
    settings = {info.name: info.settings for info in broker.queues(NOW)}
    assert (settings["a"].max_size, settings["a"].aging, settings["idle"].concurrency) == (100, 1.0, 3)


def test_the_moved_tasks_are_claimed_settled_and_unique_as_before(brokers: tuple[RedisBroker, RedisBroker]) -> None:
    old, broker = brokers
    write_every_state(old)
    assert broker._upgrade is not None
    broker._upgrade.step(NOW, budget=0.0, batch=4)  # part moved, the rest still in layout 4's slot
    assert moving(broker)
    # a unique key and a custom id held in either layout refuse a new task
    assert broker.enqueue([new("u2~b", "b", unique_key="k", unique_until=NOW + 10**6)], NOW) == ["u1"]
    assert broker.enqueue([new("order-42", "b")], NOW) == ["order-42"]
    # pending tasks of both layouts claimed, in order (priority first in a), then settled by id alone
    claimed = broker.claim(["a", "b"], NOW + 1, 30.0, limit=10)
    assert sorted(record.id for record in claimed) == ["order-42", "p1", "p2", "p3", "p4", "u1"]
    outcomes = [Outcome(record.id, record.lease_token or "", "complete") for record in claimed]
    broker._upgrade.step(NOW, budget=0.0, batch=2)  # the move goes on between the claim and the settle
    assert broker.settle(outcomes, NOW + 2) == [True] * 6
    assert broker.promote(NOW + 1000) == 2  # s1 and the retry, wherever each is
    for _ in range(100):
        if not moving(broker):
            break
        broker._upgrade.step(NOW, budget=0.0, batch=2)
    assert old_keys(broker) == []
    again = broker.claim(["a", "c"], NOW + 1001, 30.0, limit=10)  # busy's lease from layout 4 reaped first
    assert sorted(record.id for record in again) == ["again", "busy", "s1"]
    assert broker.reap(NOW + 10**5) == 3
    assert {name: info["completed"] for name, info in counts(broker).items()} == {"a": 3, "b": 3, "c": 1, "idle": 0}


def test_a_unique_key_or_custom_id_layout_4_holds_refuses_new_tasks_until_free(
    anywhere: tuple[RedisBroker, RedisBroker],
) -> None:
    """Before their tasks move, layout 4's entries are not in layout 5's indexes: ``take`` reads them
    there (the namespace slot's, layout 4's one), so the key and the id stay their task's; the key is
    free once its task finished."""
    old, broker = anywhere
    write_every_state(old)
    assert broker.enqueue([new("u2~b", "b", unique_key="k", unique_until=NOW + 10**6)], NOW) == ["u1"]
    assert broker.enqueue([new("order-42", "a")], NOW) == ["order-42"]
    assert broker.enqueue([new("order-43", "a")], NOW) == [None]
    [u1] = [record for record in broker.claim(["b"], NOW, 30.0, limit=3) if record.id == "u1"]
    assert broker.settle([Outcome("u1", u1.lease_token or "", "complete")], NOW) == [True]
    assert broker.enqueue([new("u3~b", "b", unique_key="k", unique_until=NOW + 10**6)], NOW) == [None]
    assert moving(broker)


def test_the_janitors_clean_moves_layout_4_until_it_is_empty(brokers: tuple[RedisBroker, RedisBroker]) -> None:
    old, broker = brokers
    ids = sorted(write_every_state(old))
    before = records(old, ids)
    broker.clean(NOW)
    assert not moving(broker) and old_keys(broker) == []
    assert records(broker, ids) == before
    assert broker.enqueue([new("u2~b", "b", unique_key="k", unique_until=NOW + 10**6)], NOW) == ["u1"]


def test_layout_4_is_served_in_place_before_the_move(anywhere: tuple[RedisBroker, RedisBroker]) -> None:
    """Every task the same record by id, stats the same, pending tasks claimed and settled, due ones
    promoted, all in layout 4's slot."""
    old, broker = anywhere
    states = write_every_state(old)
    ids = sorted(states)
    before, stats = records(old, ids), counts(old)
    assert records(broker, ids) == before
    assert counts(broker) == stats
    claimed = broker.claim(["a", "b", "c"], NOW + 1, 30.0, limit=10)  # busy's lease (30 s) not expired
    assert sorted(record.id for record in claimed) == ["order-42", "p1", "p2", "p3", "p4", "u1"]
    outcomes = [Outcome(record.id, record.lease_token or "", "complete") for record in claimed]
    assert broker.settle(outcomes, NOW + 2) == [True] * 6
    assert broker.promote(NOW + 1000) == 2
    assert {name: info["completed"] for name, info in counts(broker).items()} == {"a": 3, "b": 3, "c": 1, "idle": 0}
    assert records(old, ids) == records(broker, ids)


def test_settings_changed_before_the_move_apply_to_the_tasks_still_in_layout_4(
    brokers: tuple[RedisBroker, RedisBroker],
) -> None:
    """They were written in layout 5 alone, while layout 4's tasks are claimed by its slot's own: a
    pause let a layout-4 task be claimed, a resume of a queue the old version paused left it paused,
    a concurrency limit did not hold there."""
    old, broker = brokers
    old.enqueue([new("p1", "paused"), new("p2", "paused")], NOW)
    old.set_paused("resumed", True)
    old.enqueue([new("r1", "resumed")], NOW)
    old.enqueue([new("c1", "limited"), new("c2", "limited")], NOW)
    broker.set_paused("paused", True)
    broker.set_paused("resumed", False)
    broker.configure_queue(QueueSettings("limited", concurrency=1))
    assert broker.claim(["paused"], NOW + 1, 30.0, limit=10) == []
    assert [record.id for record in broker.claim(["resumed"], NOW + 1, 30.0, limit=10)] == ["r1"]
    assert len(broker.claim(["limited"], NOW + 1, 30.0, limit=10)) == 1
    broker.set_paused("paused", False)
    assert sorted(record.id for record in broker.claim(["paused"], NOW + 1, 30.0, limit=10)) == ["p1", "p2"]


def test_layout_4_settings_hold_for_layout_5_tasks_before_the_first_move(
    brokers: tuple[RedisBroker, RedisBroker],
) -> None:
    """They came over with a queue's first batch moved (a janitor tick later, or never for a consumer
    without one): meanwhile a new producer's tasks ignored the old max_size, and its claims the pause."""
    old, broker = brokers
    old.configure_queue(QueueSettings("capped", max_size=2))
    old.enqueue([new("o1", "capped")], NOW)
    old.set_paused("held", True)
    old.enqueue([new("h1", "held")], NOW)
    broker.enqueue([new("n1", "capped"), new("n2", "capped")], NOW)  # layout 5 holds 2 of them now
    with pytest.raises(QueueFull):
        broker.enqueue([new("n3", "capped")], NOW)
    broker.enqueue([new("n4", "held")], NOW)
    assert broker.claim(["held"], NOW + 1, 30.0, limit=10) == []  # neither layout's task: paused
    assert moving(broker)  # nothing moved yet: the settings came when layout 4 was first found


class Crash(Exception):
    """A mover dying between two steps of its round."""


class ApartBroker(RedisBroker):
    """A layout-5 broker that moves as on a cluster (copy, then drop) even on one server, and dies at
    the step named ``crash_at`` ("upgrade_drop": after staging; "index": after the drop)."""

    crash_at = ""

    @property
    def joins_slots(self) -> bool:
        return False

    def _call(self, name: str, prefix: str, now: float, *args: Arg) -> Any:
        if self.crash_at and self.crash_at in (name, args[0] if args else None):
            raise Crash(self.crash_at)
        return super()._call(name, prefix, now, *args)


@pytest.fixture(params=["server, as on a cluster", pytest.param("cluster", marks=pytest.mark.slow)])
def apart_url(request: pytest.FixtureRequest) -> str:
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster_url"))
    return str(request.getfixturevalue("server").url)


def apart(url: str, crash_at: str = "") -> ApartBroker:
    config = RedisConfig.from_url(url)
    broker = ApartBroker(config, keys=Keys5(config.namespace))
    broker.crash_at = crash_at
    return broker


def test_the_copy_then_drop_move_keeps_every_record(apart_url: str) -> None:
    config = RedisConfig.from_url(apart_url)
    old, broker = RedisBroker(config, keys=Keys(config.namespace)), apart(apart_url)
    try:
        ids = sorted(write_every_state(old))
        before, stats = records(old, ids), counts(old)
        assert broker._upgrade is not None
        for _ in range(100):
            if not moving(broker):
                break
            assert broker._upgrade.step(NOW, budget=0.0, batch=3) <= 3
            assert records(broker, ids) == before
            assert counts(broker) == stats
        assert old_keys(broker) == []
        assert records(broker, ids) == before
        assert broker.client.hget(broker.keys.ids, "order-42") == "b " + repr(NOW)
        assert broker.client.hget(broker.keys.uniq, "k") == "u1 " + repr(NOW)
        claimed = broker.claim(["a", "b", "c"], NOW + 1, 30.0, limit=10)
        assert sorted(record.id for record in claimed) == ["order-42", "p1", "p2", "p3", "p4", "u1"]
    finally:
        old.close()
        broker.close()


@pytest.mark.parametrize("crash_at", ["upgrade_drop", "index"])
def test_a_mover_killed_between_copy_and_drop_loses_nothing(apart_url: str, crash_at: str) -> None:
    """``upgrade_drop``: killed with copies staged, before the drop; ``index``: after the drop, before
    the copies are indexed. Every task stays found by id, and the next mover (its lock expired)
    recovers the staged copies and finishes the move: every record as it was, every task claimable."""
    config = RedisConfig.from_url(apart_url)
    old, dying = RedisBroker(config, keys=Keys(config.namespace)), apart(apart_url, crash_at)
    ids = sorted(write_every_state(old))
    before, stats = records(old, ids), counts(old)
    try:
        assert dying._upgrade is not None
        with pytest.raises(Crash):
            dying._upgrade.step(NOW, budget=0.0, batch=5)
    finally:
        dying.close()
    staged = [
        task_id
        for queue in ("a", "b", "c")
        for task_id in map(str, old.client.smembers(Keys5(config.namespace).queue_prefix(queue) + "staged"))
    ]
    assert len(staged) == 5  # the copies of the dead round
    broker = apart(apart_url)
    try:
        assert records(broker, ids) == before
        if crash_at == "upgrade_drop":  # nothing dropped: everything still served where it was
            assert counts(broker) == stats
        broker.client.delete(broker.keys.prefix + "moving")  # the dead mover's lock, as its expiry would
        assert broker._upgrade is not None
        for _ in range(100):
            if not moving(broker):
                break
            broker._upgrade.step(NOW, budget=0.0, batch=5)
        assert old_keys(broker) == []
        assert records(broker, ids) == before
        assert counts(broker) == stats
        claimed = broker.claim(["a", "b", "c"], NOW + 1, 30.0, limit=10)
        assert sorted(record.id for record in claimed) == ["order-42", "p1", "p2", "p3", "p4", "u1"]
    finally:
        old.close()
        broker.close()


def test_a_mover_that_lost_its_lock_drops_nothing(apart_url: str) -> None:
    """A mover stalled between its stage and its drop past its lock's expiry: the next mover takes
    the lock and its recovery deletes the stalled one's copies; the stalled mover's drop, sent late,
    is refused, so every task keeps a copy found by id, and the next mover moves them all."""
    config = RedisConfig.from_url(apart_url)
    old, late, later = (
        RedisBroker(config, keys=Keys(config.namespace)),
        apart(apart_url, "upgrade_drop"),
        apart(apart_url),
    )
    ids = sorted(write_every_state(old))
    before, stats = records(old, ids), counts(old)
    try:
        assert late._upgrade is not None and later._upgrade is not None
        with pytest.raises(Crash):
            late._upgrade.step(NOW, budget=0.0, batch=5)
        keys, lock = Keys5(config.namespace), Keys5(config.namespace).prefix + "moving"
        staged = {
            queue_label(queue): sorted(map(str, old.client.smembers(keys.queue_prefix(queue) + "staged")))
            for queue in ("a", "b", "c")
        }
        rows = old.client.hgetall(Keys(config.namespace).rows)
        by_label = {
            label: [(task_id, str(rows[task_id])) for task_id in group] for label, group in staged.items() if group
        }
        assert sum(map(len, by_label.values())) == 5
        old.client.set(lock, later._upgrade._token)  # the stalled mover's lock expired; another took it
        later._upgrade._recover(NOW)
        late.crash_at = ""
        assert late._upgrade._drop(NOW, by_label) == -1
        assert records(later, ids) == before
        for _ in range(100):
            if not moving(later):
                break
            later._upgrade.step(NOW, budget=0.0, batch=5)
        assert records(later, ids) == before
        assert counts(later) == stats
    finally:
        old.close()
        late.close()
        later.close()


def move_all(broker: RedisBroker) -> None:
    """Every task of layout 4 moved by a fresh broker on layout 5's keys (``broker``'s own would trust
    its last "nothing there" for up to :data:`upgrade.RECHECK` seconds)."""
    with closing(RedisBroker(broker.config, keys=Keys5(broker.keys.namespace))) as mover:
        assert mover._upgrade is not None
        for _ in range(100):
            mover._upgrade.step(NOW, batch=2)
            if not moving(mover):
                return
    raise AssertionError("layout 4 never emptied")


def test_a_custom_id_the_version_before_stores_again_after_its_task_moved_runs_once_then_is_dropped(
    anywhere: tuple[RedisBroker, RedisBroker],
) -> None:
    """The version before cannot see layout 5: once ``order-42``'s task moved, its enqueue of that id
    (a retried webhook, say) stores a second task in layout 4, in the same queue or another. Served in
    place, such a task runs once: its lease is extended and its outcome written in layout 4's slot,
    where the entry does not lead (addressing._elsewhere); the move then drops it as the duplicate this
    version refuses, and the id's task is still the moved one (before, the outcome went to the moved
    task's slot and was refused: the task ran again at each lease expiry until archived as poison, and
    on one server the move left it in layout 4 for good)."""
    old, broker = anywhere
    assert old.enqueue([new("order-42", "b"), new("order-43", "b", unique_key="k", unique_until=NOW + 99)], NOW) == [
        None,
        None,
    ]
    move_all(broker)
    [first, first43] = broker.claim(["b"], NOW, 30.0, limit=2)
    done = [Outcome("order-42", first.lease_token or "", "complete", result='"first"')]
    assert broker.settle([*done, Outcome("order-43", first43.lease_token or "", "complete")], NOW) == [True, True]
    original = broker.get("order-42", NOW)

    again = [new("order-42", "b"), new("order-43", "c", unique_key="k", unique_until=NOW + 99)]
    assert old.enqueue(again, NOW + 1) == [None, None]  # no duplicate for the version before
    with closing(RedisBroker(broker.config, keys=Keys5(broker.keys.namespace))) as serving:
        claimed = {record.id: record for record in serving.claim(["b", "c"], NOW + 2, 30.0, limit=5)}
        assert sorted(claimed) == ["order-42", "order-43"]  # the second tasks, served in place
        tokens = {task_id: record.lease_token or "" for task_id, record in claimed.items()}
        assert serving.extend("order-42", tokens["order-42"], NOW + 3, 30.0) is not None
        outcomes = [Outcome(task_id, token, "complete", result='"again"') for task_id, token in tokens.items()]
        assert serving.settle(outcomes, NOW + 4) == [True, True]
        assert serving.get("order-42", NOW + 4) == original
    move_all(broker)
    assert old_keys(broker) == []
    assert broker.get("order-42", NOW + 5) == original
    assert {name: info["completed"] for name, info in counts(broker).items()} == {"b": 2, "c": 0}


@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.slow)])
def test_an_app_on_layout_5_runs_what_an_app_on_layout_4_left(
    request: pytest.FixtureRequest, clock: FakeClock, where: str
) -> None:
    """End to end: today's app (layout 4) enqueues; the new version's worker runs every task while its
    janitor's call moves them, the delayed one too, and finds each result by id."""
    url = (
        str(request.getfixturevalue("redis_cluster_url"))
        if where == "cluster"
        else request.getfixturevalue("server").url
    )
    config = RedisConfig.from_url(url)
    before = Conveyor(broker=RedisBroker(config, keys=Keys(config.namespace)), clock=clock)
    after = Conveyor(broker=RedisBroker(config, keys=Keys5(config.namespace)), clock=clock)
    try:
        for app in (before, after):
            app.task(name="job")(lambda n: n * 2)
        handles = [before.enqueue("job", [n], queue="abc"[n % 3]) for n in range(30)]
        later = before.enqueue("job", [100], queue="a", delay=30.0)
        custom = before.enqueue("job", [7], queue="b", task_id="order-7")
        broker = cast("RedisBroker", after.broker)
        worker = after.worker(queues=["a", "b", "c"])
        for step in itertools.count():
            if step % 5 == 0:
                broker.clean(clock(), 0)  # the janitor's call: it moves, up to 1 s
            if not worker.process_next():
                break
        clock.advance(31.0)
        assert worker.process_next() and not worker.process_next()
        assert [after.get(handle.id).result for handle in handles] == [2 * n for n in range(30)]
        assert after.get(later.id).result == 200 and after.get(custom.id).result == 14
        assert not moving(broker)
    finally:
        before.close()
        after.close()
