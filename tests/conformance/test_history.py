"""Per-minute execution counts (``conveyor.history``): what a settle counts, in which minute, how far back."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.history import KEEP_MINUTES, MinuteCounts, minute_of
from conveyor.lease import Lease
from conveyor.model import Outcome

MINUTE_START = 999_960.0  # the minute the FakeClock starts in (at 1_000_000.0, 40 s into it)


def lease(app: Conveyor, queue: str = "default") -> Lease:
    claimed = app.claim([queue], lease_for=30)
    assert claimed is not None
    return claimed


def current(app: Conveyor, queue: str | None = None) -> MinuteCounts:
    [counts] = app.inspect.history(queue, minutes=1)
    return counts


def test_nothing_settled_reads_as_zeros_for_every_minute(app: Conveyor, clock: FakeClock) -> None:
    series = app.inspect.history(minutes=5)
    assert series == [MinuteCounts(MINUTE_START + 60 * (i - 4)) for i in range(5)]
    assert [c.processed for c in series] == [0] * 5


def test_each_applied_outcome_counts_once_for_its_queue(app: Conveyor, clock: FakeClock) -> None:
    for queue in ("a", "a", "a", "a", "b"):
        app.enqueue("job", queue=queue, max_retries=1)
    lease(app, "a").complete("done")
    lease(app, "a").fail("boom")  # a retry left: retried
    lease(app, "a").fail("fatal", retry=False)  # archived
    lease(app, "a").release()  # the attempt given back: not an execution
    lease(app, "b").complete()
    assert current(app, "a") == MinuteCounts(MINUTE_START, completed=1, retried=1, archived=1)
    assert current(app, "b") == MinuteCounts(MINUTE_START, completed=1)
    assert current(app) == MinuteCounts(MINUTE_START, completed=2, retried=1, archived=1)
    assert (current(app).failed, current(app).processed) == (2, 4)
    assert current(app, "c") == MinuteCounts(MINUTE_START)


def test_an_outcome_that_lost_its_lease_counts_nothing(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("job")
    held = lease(app)
    stale = Outcome(held.task.id, "not-the-token", "complete", result="1")
    assert app.broker.settle([stale], clock.now()) == [False]
    assert current(app).processed == 0


def test_a_batch_settle_counts_every_outcome_it_applies(app: Conveyor, clock: FakeClock) -> None:
    for _ in range(5):
        app.enqueue("job", queue="bulk")
    records = app.broker.claim(["bulk"], clock.now(), 30.0, limit=5)
    outcomes = [Outcome(r.id, r.lease_token or "", "complete", result="1") for r in records[:3]]
    outcomes += [Outcome(r.id, r.lease_token or "", "retry", error="x", run_at=clock.now() + 5) for r in records[3:]]
    outcomes.append(outcomes[0])  # the same task twice: the first settle ended its lease
    assert app.broker.settle(outcomes, clock.now()) == [True] * 5 + [False]
    assert current(app, "bulk") == MinuteCounts(MINUTE_START, completed=3, retried=2)


def test_settles_count_in_the_minute_of_now(app: Conveyor, clock: FakeClock) -> None:
    for _ in range(3):
        app.enqueue("job")
    clock.set(MINUTE_START + 59.999)
    lease(app).complete()
    clock.set(MINUTE_START + 60.0)
    lease(app).complete()
    clock.set(MINUTE_START + 180.5)
    lease(app).fail("boom", retry=False)
    series = app.inspect.history(minutes=5)
    assert [c.at for c in series] == [MINUTE_START + 60 * i for i in range(-1, 4)]
    assert [(c.completed, c.archived) for c in series] == [(0, 0), (1, 0), (1, 0), (0, 0), (0, 1)]


def test_history_reaches_back_24_hours_and_no_further(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("job")
    lease(app).complete()
    clock.advance(60 * (KEEP_MINUTES - 1))  # that minute is the oldest of the last 24 h
    app.broker.clean(clock.now())
    assert app.inspect.history(minutes=KEEP_MINUTES)[0] == MinuteCounts(MINUTE_START, completed=1)
    clock.advance(60)
    app.broker.clean(clock.now())
    series = app.inspect.history(minutes=KEEP_MINUTES)
    assert len(series) == KEEP_MINUTES
    assert series[0].at == MINUTE_START + 60 and sum(c.processed for c in series) == 0
    assert series[-1].at == 60 * minute_of(clock.now())


def test_history_refuses_a_window_it_does_not_keep(app: Conveyor) -> None:
    with pytest.raises(ValueError, match="24 h"):
        app.inspect.history(minutes=KEEP_MINUTES + 1)
    with pytest.raises(ValueError):
        app.inspect.history(minutes=0)
    with pytest.raises(TypeError):
        app.inspect.history(minutes=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        app.inspect.history("")
