"""How each broker stores and forgets the per-minute counters (the rule itself: conformance/test_history.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.brokers.base import KeepsHistory
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.sqlite.schema import _V1, MIGRATIONS, SCHEMA_VERSION
from conveyor.history import KEEP_MINUTES, QueueMinute, minute_of


def stored(app: Conveyor, minute: int) -> list[QueueMinute]:
    assert isinstance(app.broker, KeepsHistory)
    return app.broker.history(minute, minute)


@pytest.fixture
def settled(app: Conveyor, clock: FakeClock) -> Iterator[int]:
    """One task completed on queue ``q``; yields the minute it was settled in."""
    app.enqueue("job", queue="q")
    claimed = app.claim(["q"])
    assert claimed is not None
    claimed.complete()
    yield minute_of(clock.now())


def test_a_settle_stores_one_row_per_queue_and_minute(app: Conveyor, settled: int) -> None:
    assert stored(app, settled) == [QueueMinute("q", settled, completed=1)]


def test_clean_forgets_minutes_older_than_24_hours(app: Conveyor, clock: FakeClock, settled: int) -> None:
    if isinstance(app.broker, RedisBroker):
        pytest.skip("Redis forgets by key expiry (test_the_redis_counters_expire_after_24_hours)")
    clock.advance(60 * (KEEP_MINUTES - 1))
    app.broker.clean(clock.now())
    assert stored(app, settled)
    clock.advance(60)
    app.broker.clean(clock.now())
    assert stored(app, settled) == []


def test_the_redis_counters_expire_after_24_hours(app: Conveyor, settled: int) -> None:
    if not isinstance(app.broker, RedisBroker):
        pytest.skip("Redis only")
    keys = app.broker.keys
    key = keys.slot(keys.queue_prefix("q")).history(settled)  # the queue's slot (layout 5)
    assert app.broker.client.hgetall(key) == {"c:q": "1"}
    assert KEEP_MINUTES * 60 < app.broker.client.ttl(key) <= KEEP_MINUTES * 60 + 120


def test_a_version_1_sqlite_file_gains_the_history_table_and_keeps_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        for statement in _V1:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    clock = FakeClock(1_000_000.0)
    app = Conveyor(f"sqlite:///{path}", clock=clock)
    try:
        app.enqueue("job", task_id="after-upgrade")
        claimed = app.claim()
        assert claimed is not None
        claimed.complete()
        assert app.inspect.history(minutes=1)[0].completed == 1
    finally:
        app.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    conn.close()


def test_a_version_4_sqlite_file_gains_the_traceback_column_and_keeps_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    with sqlite3.connect(path) as conn:
        for step in MIGRATIONS[:4]:
            for statement in step:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    app = Conveyor(f"sqlite:///{path}", clock=FakeClock(1_000_000.0))
    try:
        app.enqueue("job", task_id="after-upgrade", max_retries=0)
        claimed = app.claim()
        assert claimed is not None
        try:
            raise ValueError("boom")
        except ValueError as exc:
            claimed.fail(exc)
        assert "ValueError: boom" in (app.get("after-upgrade").traceback or "")
    finally:
        app.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "traceback" in [row[1] for row in conn.execute("PRAGMA table_info(tasks)")]
    conn.close()
