"""Outcomes settled with the next claim, on a broker that ``SettlesWithClaim`` (SQLite: one commit for both)."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, TaskState
from conveyor.brokers.base import Broker, SettlesWithClaim
from conveyor.model import Outcome
from conveyor.testing import SpyBroker, poll_until
from conveyor.worker.acker import Acker
from conveyor.worker.buffer import Buffer
from conveyor.worker.config import WorkerConfig
from conveyor.worker.fetcher import Fetcher
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.prefetch import MOST_SYNCED

from .conftest import Start


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(f"sqlite:///{tmp_path / 'conveyor.db'}")

    @app.task
    def job() -> None: ...

    job.enqueue_many([((), {})] * 6)
    yield app
    app.close()


def _parts(app: Conveyor, claimed: int) -> tuple[Inflight, Acker, Fetcher, list[Held]]:
    inflight = Inflight()
    acker = Acker(app, inflight)  # not started: only the fetcher writes what it holds
    fetcher = Fetcher(app, WorkerConfig(concurrency=4, poll_interval=60.0), inflight, Buffer(), acker=acker)
    fetcher.fetch(claimed)
    return inflight, acker, fetcher, inflight.snapshot()


def _complete(acker: Acker, held: Held) -> None:
    acker.submit(held, Outcome(held.id, held.token, "complete"))


def _state(app: Conveyor, task_id: str) -> TaskState | None:
    rec = app.broker.get(task_id, app.now())
    return None if rec is None else rec.state


def _completed(app: Conveyor) -> int:
    return sum(q.counts.get(TaskState.COMPLETED, 0) for q in app.broker.queues(app.now()))


def test_sqlite_settles_and_claims_in_one_call(sqlite_app: Conveyor) -> None:
    assert isinstance(sqlite_app.broker, SettlesWithClaim)


def test_a_sqlite_fetcher_prefetches_up_to_the_synced_cap(sqlite_app: Conveyor) -> None:
    _, _, fetcher, _ = _parts(sqlite_app, 1)
    assert fetcher.prefetch.most == MOST_SYNCED


def test_a_claim_settles_the_outcomes_the_acker_holds(sqlite_app: Conveyor) -> None:
    inflight, acker, fetcher, helds = _parts(sqlite_app, 2)
    for held in helds:
        _complete(acker, held)
    claimed = fetcher.fetch(3)
    assert len(claimed) == 3
    assert [_state(sqlite_app, held.id) for held in helds] == [TaskState.COMPLETED] * 2
    assert acker.take() == []  # taken and written by the claim
    assert acker.processed == 2 and len(inflight) == 3  # counted, and no longer held


def test_outcomes_a_failed_claim_took_go_back_to_the_acker_in_order(sqlite_app: Conveyor) -> None:
    _, acker, fetcher, helds = _parts(sqlite_app, 2)
    first, second = helds
    acker.submit(first, Outcome(first.id, first.token, "bogus"))  # the broker refuses the batch
    _complete(acker, second)
    with pytest.raises(ValueError, match="bogus"):
        fetcher.fetch(1)
    assert [outcome.kind for _, outcome in acker.take()] == ["bogus", "complete"]
    assert _state(sqlite_app, second.id) is TaskState.ACTIVE  # nothing was claimed or settled after it


def test_take_leaves_the_stop_marker_for_the_acker(sqlite_app: Conveyor) -> None:
    _, acker, _, helds = _parts(sqlite_app, 1)
    _complete(acker, helds[0])
    acker.start()
    acker.stop()  # the acker's own loop still writes what it holds, then stops
    assert _state(sqlite_app, helds[0].id) is TaskState.COMPLETED
    assert acker.take() == []


def test_a_lingering_acker_leaves_outcomes_to_the_claim_until_nudged(sqlite_app: Conveyor) -> None:
    inflight = Inflight()
    acker = Acker(sqlite_app, inflight, linger=60.0)
    soon = threading.Event()
    soon.set()
    acker.claims_soon = soon.is_set
    helds = inflight.add(sqlite_app.broker.claim(["default"], sqlite_app.now(), 30.0, limit=2))
    acker.start()
    try:
        _complete(acker, helds[0])
        time.sleep(0.2)  # (a window for the acker to write it, which it must not take)
        assert _state(sqlite_app, helds[0].id) is TaskState.ACTIVE  # a claim is coming: left for it
        assert [held.id for held, _ in acker.take()] == [helds[0].id]  # (as the claim would take it)
        _complete(acker, helds[1])
        soon.clear()
        acker.nudge()  # no claim soon: the acker writes it now, not after its 60 s linger
        poll_until(lambda: _state(sqlite_app, helds[1].id) is TaskState.COMPLETED, message="the nudged settle")
    finally:
        acker.stop()


@pytest.fixture
def spy() -> Iterator[SpyBroker[Broker]]:
    """A SQLite broker seen through a ``SpyBroker``, closed after the worker stopped."""
    with tempfile.TemporaryDirectory() as folder:
        spied = SpyBroker.from_url(f"sqlite:///{Path(folder) / 'spied.db'}")
        yield spied
        spied.close()


def test_a_busy_sqlite_worker_settles_with_its_claims(spy: SpyBroker[Broker], start_worker: Start) -> None:
    app = Conveyor(broker=spy)

    @app.task
    def job() -> None: ...

    # 2,000: the last claim's tasks (up to the prefetch bound, ~300) settle on their own at the end,
    # which with 1,000 left a slow disk's run at 510 settled alone (256 + 54 + 200)
    job.enqueue_many([((), {}) for _ in range(2000)])
    start_worker(app)
    poll_until(lambda: _completed(app) == 2000, timeout=60.0, message="the drain")
    settles = [len(call.arguments["outcomes"]) for call in spy.calls_to("settle")]
    assert sum(settles) < 1000  # most outcomes rode with a claim instead of a settle of their own
