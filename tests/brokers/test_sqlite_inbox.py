"""SQLite's inbox (``conveyor/brokers/sqlite/inbox.py``): where a one-task enqueue of a generated id
lands, how every other write folds it into ``tasks`` and every read sees it, the semantics unchanged."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, QueueFull
from conveyor.brokers.sqlite import SQLiteBroker, inbox
from conveyor.model import Event, NewTask, QueueInfo, QueueSettings, TaskRecord, TaskState

NOW = 1_000_000.0


def _rows(db_path: Path, table: str) -> list[str]:
    """The task ids ``table`` holds, read with a connection of its own (no broker folds anything)."""
    order = "n" if table == "inbox" else "seq"
    with closing(sqlite3.connect(db_path)) as conn:
        return [row[0] for row in conn.execute(f"SELECT id FROM {table} ORDER BY {order}")]


def _fresh(task_id: str, queue: str = "default", **fields: object) -> NewTask:
    return NewTask(task_id, "job", queue, "[]", fresh=True, **fields)  # type: ignore[arg-type]


def test_an_enqueue_of_a_generated_id_is_one_inbox_row_that_any_read_sees(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    app = Conveyor(broker=open_sqlite())
    handle = app.enqueue("job", [1])
    assert (_rows(db_path, "inbox"), _rows(db_path, "tasks")) == ([handle.id], [])
    other = open_sqlite()  # another process's broker object: its reads add the inbox's tasks
    record = other.get(handle.id, NOW)
    assert record is not None and record.state is TaskState.PENDING and record.payload == '{"args":[1],"kwargs":{}}'
    assert [r.id for r in other.list_tasks("default", TaskState.PENDING, NOW)] == [handle.id]
    assert other.queues(NOW)[0].counts["pending"] == 1
    assert (_rows(db_path, "inbox"), _rows(db_path, "tasks")) == ([handle.id], [])  # a read writes nothing


def test_a_read_gives_the_same_answers_before_and_after_the_fold(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    broker = open_sqlite()
    broker.configure_queue(QueueSettings("aged", aging=10.0))
    broker.enqueue([NewTask(f"old{i}", "job", "aged", "[]", i % 3) for i in range(5)], NOW)  # in tasks
    for i in range(7):  # into the inbox, between and around them in claim order
        at = NOW + i
        broker.enqueue([_fresh(f"new{i}", "aged", priority=i % 4 - 1)], at)
        broker.enqueue([_fresh(f"later{i}", "aged", run_at=NOW + 100 - i, expires_at=NOW + 500)], at)
        broker.enqueue([_fresh(f"fresh{i}", f"q{i % 2}")], at)
    assert len(_rows(db_path, "inbox")) == 21

    def answers() -> tuple[list[list[str]], list[TaskRecord | None], list[QueueInfo]]:
        listed = [
            [r.id for r in broker.list_tasks(queue, state, NOW + 10, offset, limit)]
            for queue in ("aged", "q0", "q1")
            for state in (TaskState.PENDING, TaskState.SCHEDULED)
            for offset, limit in ((0, 100), (0, 3), (2, 4), (9, 5))
        ]
        records = [broker.get(task_id, NOW + 10) for task_id in ("old1", "new3", "later6", "fresh0", "none")]
        return listed, records, broker.queues(NOW + 10)

    before = answers()
    broker.set_paused("elsewhere", False)  # a write: folds the inbox
    assert _rows(db_path, "inbox") == []
    after = answers()
    assert after[0] == before[0] and after[1] == before[1]
    assert [q for q in after[2] if q.name != "elsewhere"] == before[2]


def test_tasks_keep_the_order_of_their_enqueues_across_both_ways_in(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    first, second = open_sqlite(), open_sqlite()
    first.enqueue([_fresh("a")], NOW)
    second.enqueue([NewTask("b", "job", "default", "[]")], NOW)  # a custom id: folds "a" in before it
    first.enqueue([_fresh("c")], NOW)
    second.enqueue([_fresh("d")], NOW)
    assert _rows(db_path, "inbox") == ["c", "d"]
    claimed = first.claim(["default"], NOW, 30.0, limit=2)  # folds "c" and "d" in, then claims
    assert [r.id for r in claimed] == ["a", "b"]
    assert _rows(db_path, "tasks") == ["a", "b", "c", "d"] and _rows(db_path, "inbox") == []
    assert [r.id for r in second.claim(["default"], NOW, 30.0, limit=5)] == ["c", "d"]


@pytest.mark.parametrize("aging", [None, 30.0])
def test_a_folded_task_gets_the_sort_key_its_enqueue_would_have_given(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker], aging: float | None
) -> None:
    broker = open_sqlite()
    broker.configure_queue(QueueSettings("default", aging=aging))
    for priority in (-3, 0, 7):
        broker.enqueue([_fresh(f"inbox{priority}", priority=priority)], NOW + priority)
        broker.enqueue([NewTask(f"direct{priority}", "job", "default", "[]", priority)], NOW + priority)
    broker.enqueue([NewTask("later-direct", "job", "default", "[]", run_at=NOW + 50)], NOW)
    broker.enqueue([_fresh("later", run_at=NOW + 50)], NOW)
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM inbox").fetchone()[0] == 1  # each custom id folded the one before
    broker.set_paused("other", False)  # a write: folds the last one
    with closing(sqlite3.connect(db_path)) as conn:
        keys = dict(conn.execute("SELECT id, sort_key FROM tasks"))
        states = dict(conn.execute("SELECT id, state FROM tasks"))
    for priority in (-3, 0, 7):
        assert keys[f"inbox{priority}"] == keys[f"direct{priority}"]
    assert keys["later"] == keys["later-direct"] == NOW + 50 and states["later"] == "scheduled"
    order = [r.id for r in broker.claim(["default"], NOW + 100, 30.0, limit=10)]
    assert order.index("inbox7") < order.index("inbox0") < order.index("inbox-3")


def test_a_queue_given_a_max_size_counts_what_its_inbox_held(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    broker = open_sqlite()
    for i in range(3):
        broker.enqueue([_fresh(f"t{i}")], NOW)
    assert len(_rows(db_path, "inbox")) == 3
    broker.configure_queue(QueueSettings("default", max_size=4))  # a write: folds first
    broker.enqueue([_fresh("t3")], NOW)  # a bounded queue: the general way, which counts
    assert _rows(db_path, "inbox") == []
    with pytest.raises(QueueFull):
        broker.enqueue([_fresh("t4")], NOW)
    assert _rows(db_path, "tasks") == ["t0", "t1", "t2", "t3"]


def test_while_another_broker_listens_an_enqueue_writes_its_event(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    producer, watcher = open_sqlite(), open_sqlite()
    seen: list[Event] = []
    unsubscribe = watcher.subscribe(seen.append)
    try:
        producer.enqueue([_fresh("watched")], NOW)
        assert _rows(db_path, "inbox") == []  # the general way, which writes the event for the watcher
        with closing(sqlite3.connect(db_path)) as conn:
            written = conn.execute("SELECT task_id, new_state FROM events").fetchall()
        assert written == [("watched", "pending")]
    finally:
        unsubscribe()


def test_an_enqueue_empties_an_inbox_that_reached_its_bound(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox, "FOLD_AT", 5)
    broker = open_sqlite()
    for i in range(4):
        broker.enqueue([_fresh(f"t{i}")], NOW)
    assert len(_rows(db_path, "inbox")) == 4
    broker.enqueue([_fresh("t4")], NOW)
    assert (_rows(db_path, "inbox"), _rows(db_path, "tasks")) == ([], [f"t{i}" for i in range(5)])
    broker.enqueue([_fresh("t5")], NOW)  # its rowids start again at 1: the count holds
    assert _rows(db_path, "inbox") == ["t5"]


def test_a_broken_promise_of_a_new_id_keeps_the_stored_task_and_the_file_usable(
    db_path: Path, open_sqlite: Callable[[], SQLiteBroker]
) -> None:
    broker = open_sqlite()
    broker.enqueue([NewTask("taken", "job", "default", '{"first": 1}')], NOW)
    broker.enqueue([NewTask("taken", "job", "default", '{"second": 2}', fresh=True)], NOW)
    record = broker.get("taken", NOW)
    assert record is not None and record.payload == '{"first": 1}'
    assert broker.enqueue([_fresh("next")], NOW) == [None]
    assert [r.id for r in broker.claim(["default"], NOW, 30.0, limit=5)] == ["taken", "next"]
    assert _rows(db_path, "inbox") == [] and _rows(db_path, "tasks") == ["taken", "next"]
    record = broker.get("taken", NOW)
    assert record is not None and record.payload == '{"first": 1}'


def test_a_task_in_the_inbox_runs_on_a_worker_and_its_events_reach_the_app(
    open_sqlite: Callable[[], SQLiteBroker],
) -> None:
    clock = FakeClock(NOW)
    app = Conveyor(broker=open_sqlite(), clock=clock)
    seen: list[tuple[str, str | None, str]] = []
    app.on_state_change(lambda task_id, old, new: seen.append((task_id, old, new)))
    ran: list[int] = []
    job = app.task(name="job")(ran.append)
    handle = job.enqueue(7)
    later = job.with_options(delay=30).enqueue(8)
    assert app.worker().run_until_idle() == 1 and ran == [7]
    assert app.get(handle.id).state is TaskState.COMPLETED and app.get(later.id).state is TaskState.SCHEDULED
    assert (handle.id, None, "pending") in seen and (later.id, None, "scheduled") in seen
    clock.advance(31)
    assert app.worker().run_until_idle() == 1 and ran == [7, 8]
