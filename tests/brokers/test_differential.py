"""Differential test: the same random sequence of broker calls against the reference and each backend.

``MemoryBroker`` is the reference semantics; every backend in ``CANDIDATES`` must return the same
results, emit the same events and hold the same tasks after every call. Lease tokens are random,
so each broker keeps its own token per task and records are compared with the token masked.
A backend joins by adding a factory to ``CANDIDATES`` (a context manager yielding a fresh broker).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conveyor.brokers.base import Broker, KeepsHistory
from conveyor.brokers.memory import MemoryBroker
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.errors import ConveyorError
from conveyor.history import minute_of
from conveyor.model import (
    ArchiveReason,
    BrokerPolicy,
    Event,
    NewTask,
    Outcome,
    QueueSettings,
    TaskRecord,
    TaskState,
    WorkerInfo,
)
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

POLICY = BrokerPolicy(max_stalls=2, archive_retention=40.0, max_archived=3)
START = 1_000.0
IDS = [f"t{i}" for i in range(8)]
QUEUES = ["a", "b"]

BrokerFactory = Callable[[], contextlib.AbstractContextManager[Broker]]


@contextlib.contextmanager
def _sqlite() -> Iterator[Broker]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = SQLiteBroker.from_url(f"sqlite:///{Path(tmp) / 'diff.db'}", POLICY)
        try:
            yield broker
        finally:
            broker.close()


class _FreshIds:
    """A broker told, as the app tells it, which ids are new: an id enqueued for the first time here
    is ``fresh``, so SQLite's one-task enqueues of such ids go through its inbox (``inbox.py``)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._seen: set[str] = set()

    def enqueue(self, tasks: list[NewTask], now: float) -> list[str | None]:
        marked = [replace(task, fresh=task.id not in self._seen) for task in tasks]
        self._seen.update(task.id for task in tasks)
        return self._broker.enqueue(marked, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)


@contextlib.contextmanager
def _sqlite_fresh() -> Iterator[Broker]:
    with _sqlite() as broker:
        yield _FreshIds(broker)  # type: ignore[misc]


_REDIS: list[RedisServer] = []  # one private server for the module, started on first use
_CLUSTER: list[LocalCluster] = []  # one private 3-master cluster for the module, started on first use


@contextlib.contextmanager
def _redis() -> Iterator[Broker]:
    if not _REDIS:
        _REDIS.append(RedisServer().start())
    broker = RedisBroker.from_url(_REDIS[0].namespace_url(), POLICY)  # a fresh namespace per example
    try:
        yield broker
    finally:
        broker.close()


@contextlib.contextmanager
def _redis_cluster() -> Iterator[Broker]:
    if not _CLUSTER:
        _CLUSTER.append(LocalCluster(masters=3).start())
    broker = RedisBroker.from_url(_CLUSTER[0].namespace_url(), POLICY)  # a call per slot, each queue's own
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module", autouse=True)
def _stop_redis() -> Iterator[None]:
    yield
    for server in _REDIS:
        server.stop()
    _REDIS.clear()
    for cluster in _CLUSTER:
        cluster.stop()
    _CLUSTER.clear()


CANDIDATES: dict[str, BrokerFactory] = {
    "redis": _redis,
    "redis-cluster": _redis_cluster,
    "sqlite": _sqlite,
    "sqlite-fresh-ids": _sqlite_fresh,
}

# -- operations ----------------------------------------------------------------------------------

offsets = st.sampled_from([None, 0.0, 3.0, 10.0, 25.0])
new_tasks = st.builds(
    lambda i, q, prio, run_at, expires, key, until: (IDS[i], q, prio, run_at, expires, key, until),
    st.integers(0, len(IDS) - 1),
    st.sampled_from(QUEUES),
    st.integers(-2, 2),
    offsets,
    st.sampled_from([None, 4.0, 30.0]),
    st.sampled_from([None, "k1", "k2"]),
    st.sampled_from([None, 5.0, 50.0]),
)
operations = st.one_of(
    st.tuples(st.just("enqueue"), st.lists(new_tasks, min_size=1, max_size=4)),
    st.tuples(st.just("claim"), st.permutations(QUEUES), st.sampled_from([5.0, 15.0]), st.integers(1, 3)),
    st.tuples(
        st.just("settle"),
        st.lists(
            st.tuples(
                st.sampled_from(IDS),
                st.sampled_from(["complete", "retry", "archive", "release"]),
                offsets,
                st.booleans(),  # stale token
                st.sampled_from([None, 0, 2]),  # the retry limit the execution ran with
                st.booleans(),  # with an error
            ),
            min_size=1,
            max_size=3,
        ),
    ),
    st.tuples(st.just("extend"), st.sampled_from(IDS), st.sampled_from([5.0, 20.0]), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 3.0, 6.0, 16.0, 45.0])),
    st.tuples(st.sampled_from(["promote", "reap", "clean"]), st.sampled_from([1, 2, 1000])),
    st.tuples(st.sampled_from(["run_now", "archive", "cancel", "delete"]), st.sampled_from(IDS)),
    st.tuples(st.just("purge"), st.sampled_from(QUEUES), st.sampled_from(list(TaskState)), st.sampled_from([None, 1])),
    st.tuples(
        st.just("configure"),
        st.sampled_from(QUEUES),
        st.sampled_from([None, 2, 5]),
        st.sampled_from([None, 1, 2]),
        st.sampled_from([None, 5.0]),
    ),
    st.tuples(st.just("pause"), st.sampled_from(QUEUES), st.booleans()),
    st.tuples(st.just("list"), st.sampled_from(QUEUES), st.sampled_from(list(TaskState)), st.integers(0, 2)),
    st.tuples(st.just("workers"), st.sampled_from(["w1", "w2"]), st.sampled_from([None, 5.0, 30.0])),
)


@dataclass
class Driver:
    """One broker under test, with the lease tokens it handed out and the events it reported."""

    broker: Broker
    tokens: dict[str, str]
    events: list[Event]


def _mask(value: Any) -> Any:
    """Lease tokens are random per broker: compare only whether one is set."""
    if isinstance(value, TaskRecord):
        return replace(value, lease_token="<token>" if value.lease_token else None)
    if isinstance(value, list):
        return [_mask(item) for item in value]
    return value


def _run(driver: Driver, op: tuple[Any, ...], now: float) -> Any:
    broker, kind = driver.broker, op[0]
    if kind == "enqueue":
        tasks = [
            NewTask(
                id=i, name="job", queue=q, payload="[]", priority=prio,
                run_at=None if run_at is None else now + run_at,
                expires_at=None if expires is None else now + expires,
                unique_key=key, unique_until=None if until is None else now + until,
            )
            for i, q, prio, run_at, expires, key, until in op[1]
        ]  # fmt: skip
        return broker.enqueue(tasks, now)
    if kind == "claim":
        claimed = broker.claim(op[1], now, op[2], op[3])
        driver.tokens.update((rec.id, rec.lease_token or "") for rec in claimed)
        return claimed
    if kind == "settle":
        outcomes = [
            Outcome(
                task_id, "stale" if stale else driver.tokens.get(task_id, "none"), kind_,
                result='"ok"', error=f"{kind_} error" if with_error else None,
                run_at=None if run_at is None else now + run_at,
                reason=ArchiveReason.FAILED if kind_ == "archive" else None, keep_for=20.0, max_retries=limit,
            )
            for task_id, kind_, run_at, stale, limit, with_error in op[1]
        ]  # fmt: skip
        return broker.settle(outcomes, now)
    if kind == "extend":
        return broker.extend(op[1], "stale" if op[3] else driver.tokens.get(op[1], "none"), now, op[2])
    if kind == "promote":
        return broker.promote(now, op[1])
    if kind == "reap":
        return broker.reap(now, op[1])
    if kind == "clean":
        return broker.clean(now, op[1])
    if kind == "run_now":
        return broker.run_now(op[1], now)
    if kind == "archive":
        return broker.archive(op[1], now)
    if kind == "cancel":
        return broker.cancel(op[1], now)
    if kind == "delete":
        return broker.delete(op[1], now)
    if kind == "purge":
        return broker.purge(op[1], op[2], now, op[3])
    if kind == "configure":
        return broker.configure_queue(QueueSettings(op[1], max_size=op[2], concurrency=op[3], aging=op[4]))
    if kind == "pause":
        return broker.set_paused(op[1], op[2])
    if kind == "list":
        return broker.list_tasks(op[1], op[2], now, offset=op[3], limit=3)
    if kind == "workers":
        if op[2] is None:
            broker.unregister_worker(op[1])
        else:
            broker.register_worker(WorkerInfo(op[1], "host", 1, ("a",), 2, START), now, op[2])
        return broker.workers(now)
    raise AssertionError(kind)


def _outcome(driver: Driver, op: tuple[Any, ...], now: float) -> Any:
    try:
        return _mask(_run(driver, op, now))
    except ConveyorError as exc:
        return type(exc).__name__


def _per_queue(events: list[Event]) -> dict[str, list[Event]]:
    """Events in order within each queue: the order across queues is not part of the contract (queues
    of a Redis namespace live in slots of their own, each with its own event stream)."""
    queues: dict[str, list[Event]] = {}
    for event in events:
        queues.setdefault(event.queue, []).append(event)
    return queues


def _snapshot(broker: Broker, now: float) -> Any:
    tasks = {task_id: _mask(broker.get(task_id, now)) for task_id in IDS}
    assert isinstance(broker, KeepsHistory)
    counts = sorted(broker.history(minute_of(START), minute_of(now)), key=lambda row: (row.minute, row.queue))
    return tasks, broker.queues(now), counts


def check_same_behaviour(
    factory: BrokerFactory, ops: list[tuple[Any, ...]], whole_calls: bool = True, full_claims_upkeep: bool = True
) -> None:
    """``whole_calls`` False: the candidate may refuse a call over several queues with ``QueueFull``
    after storing the tasks of other queues (Redis, a slot per queue: docs/architecture.md); the run
    then ends at such a call, once it is refused alike. ``full_claims_upkeep`` False: a claim that
    fills its ``limit`` in an earlier queue may leave the later queues' upkeep (due tasks promoted,
    leases and deadlines reaped) to the janitor (a Redis Cluster, a call per slot); the candidate's
    janitor then does it (``reap``) before the states are compared."""
    with factory() as candidate:
        drivers = [Driver(MemoryBroker(POLICY), {}, []), Driver(candidate, {}, [])]
        for driver in drivers:
            driver.broker.subscribe(driver.events.append)
        now = START
        for step, op in enumerate(ops):
            if op[0] == "advance":
                now += op[1]
                continue
            reference, actual = (_outcome(driver, op, now) for driver in drivers)
            assert actual == reference, f"step {step}: {op!r} at {now}"
            if not whole_calls and op[0] == "enqueue" and actual == "QueueFull" and len({t[1] for t in op[1]}) > 1:
                return
            if not full_claims_upkeep and op[0] == "claim" and isinstance(actual, list) and len(actual) == op[3]:
                candidate.reap(now, 10**6)
            assert _per_queue(drivers[1].events) == _per_queue(drivers[0].events), f"events after step {step}: {op!r}"
            assert _snapshot(candidate, now) == _snapshot(drivers[0].broker, now), f"state after step {step}: {op!r}"


@pytest.mark.slow  # 200 random examples a backend, Redis on servers of its own: ~1 min each
@pytest.mark.timeout(600)  # a failure's shrinking may take minutes (Hypothesis stops it at five)
@pytest.mark.parametrize("backend", sorted(CANDIDATES))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(operations, min_size=1, max_size=40))
# cases a slot per queue once answered otherwise: a claim filled in queue `a` leaving `b`'s upkeep (its
# expired task archived one call late), and one id and one unique key in tasks of two slots
@example(
    ops=[
        ("enqueue", [("t0", "a", 0, None, None, None, None), ("t1", "b", 0, None, 4.0, None, None)]),
        ("advance", 6.0),
        ("claim", ["a", "b"], 5.0, 1),
    ]
)
@example(
    ops=[
        (
            "enqueue",
            [
                ("t0", "b", 0, None, None, "k1", None),
                ("t1", "a", 0, None, None, None, None),
                ("t1", "a", 0, None, None, "k1", None),
            ],
        )
    ]
)
@example(
    ops=[
        ("enqueue", [("t0", "a", 0, None, None, None, None)]),
        ("enqueue", [("t1", "a", 0, None, None, "k1", 5.0)]),
        ("enqueue", [("t0", "a", 0, None, None, None, None), ("t0", "a", 0, None, None, "k1", None)]),
    ]
)
@example(
    ops=[
        ("enqueue", [("t3", "b", 0, None, None, "k1", 50.0)]),
        ("enqueue", [("t2", "b", 0, None, None, None, None), ("t2", "b", 0, None, None, "k1", None)]),
    ]
)
# upkeep over two slots: a limit spent on the earliest over every queue, ties in enqueue order (of
# one call, of two calls), as memory:// spends it, where each slot's call spent it in slot order
@example(
    ops=[
        (
            "enqueue",
            [
                ("t2", "b", 0, 3.0, None, None, None),
                ("t1", "a", 0, 3.0, None, None, None),
                ("t0", "b", 0, 3.0, None, None, None),
            ],
        ),
        ("advance", 6.0),
        ("promote", 1),
    ]
)
@example(
    ops=[
        ("enqueue", [("t1", "b", 0, None, 4.0, None, None)]),
        ("enqueue", [("t0", "a", 0, None, 4.0, None, None)]),
        ("advance", 6.0),
        ("reap", 1),
    ]
)
@example(
    ops=[
        ("enqueue", [("t1", "b", 0, None, None, None, None), ("t0", "a", 0, None, None, None, None)]),
        ("claim", ["a", "b"], 5.0, 2),
        ("advance", 6.0),
        ("reap", 1),
    ]
)
# clean: every queue's tasks past keep_until before any queue's archived beyond the cap, queues by name
@example(
    ops=[
        ("enqueue", [("t0", "a", 0, None, None, None, None), ("t1", "a", 0, None, None, None, None)]),
        ("enqueue", [("t2", "a", 0, None, None, None, None), ("t3", "a", 0, None, None, None, None)]),
        ("archive", "t0"),
        ("archive", "t1"),
        ("archive", "t2"),
        ("archive", "t3"),
        ("enqueue", [("t4", "b", 0, None, None, None, None), ("t5", "b", 0, None, None, None, None)]),
        ("claim", ["b", "a"], 5.0, 2),
        ("settle", [("t4", "complete", None, False, None, False), ("t5", "complete", None, False, None, False)]),
        ("advance", 25.0),
        ("clean", 2),
    ]
)
@example(
    ops=[
        ("enqueue", [(f"t{i}", "b", 0, None, None, None, None) for i in range(4)]),
        ("enqueue", [(f"t{i}", "a", 0, None, None, None, None) for i in range(4, 8)]),
        *[("archive", f"t{i}") for i in range(8)],
        ("clean", 1),
    ]
)
@example(  # a task's events in the order of the tasks stored: t1's first task is its key's duplicate
    ops=[
        ("enqueue", [("t3", "a", 0, None, None, "k1", 5.0)]),
        (
            "enqueue",
            [
                ("t0", "a", 0, None, None, None, None),
                ("t1", "b", 0, None, None, "k1", None),
                ("t2", "b", 0, None, None, None, None),
                ("t1", "b", 0, None, None, None, None),
            ],
        ),
    ]
)
@example(  # a duplicate's id answers before a full queue's refusal, one task as several
    ops=[
        ("enqueue", [("t0", "b", 0, None, None, None, None), ("t2", "b", 0, None, None, None, None)]),
        ("configure", "b", 2, None, None),
        ("enqueue", [("t0", "b", 0, None, None, None, None)]),
    ]
)
def test_backend_behaves_like_the_reference(backend: str, ops: list[tuple[Any, ...]]) -> None:
    redis = backend.startswith("redis")
    check_same_behaviour(CANDIDATES[backend], ops, whole_calls=not redis, full_claims_upkeep=backend != "redis-cluster")
