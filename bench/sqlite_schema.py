"""Raw SQL of one enqueue, claim and settle under other ``tasks`` layouts (issue 42): ``python -m
bench.sqlite_schema DIR COUNT PASSES`` prints one line per pass, mode, payload and layout.

Each pass and ``synchronous`` mode, on fresh files in ``DIR``: ``COUNT`` bare one-row WAL transactions,
then per layout ``COUNT`` one-task enqueues (``BEGIN IMMEDIATE``, the broker's prelude ``SELECT``, its
``INSERT``, ``COMMIT``) and a drain of them, one transaction to claim one task (the due check, the
ready read, the ``UPDATE ... RETURNING``) and one to complete it (the fence read, the ``UPDATE``), as
``conveyor.brokers.sqlite.ops`` does with a batch of one. Wall and thread CPU time per call, and the
ratio of the enqueue to the bare transaction measured just before it. No Conveyor Python runs, so the
figures are what the storage costs whatever the code around it.

Layouts: ``current`` (the rowid table, its ``id`` index, ``tasks_order``); ``norowid`` (``WITHOUT
ROWID`` keyed by ``id``, ``seq`` an ordinary column, here numbered by the process: a real layout would
have to number it across processes, at some cost, so this is its best case); ``two`` (the rowid table
and ``tasks_order`` without the ``id`` index: the least any layout that claims from an index writes);
``bound`` (the row alone, in the table's B-tree). ``two`` and ``bound`` are not usable layouts (no
lookup by ``id``, or no claim order) and have no drain. Last, ``app``: one ``enqueue()`` of a Conveyor
app on the current layout, the whole call, for what the Python around the statements adds.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from conveyor import Conveyor
from conveyor.brokers.sqlite import ops, schema

__all__ = ["LAYOUTS", "measure"]

LAYOUTS = ("current", "norowid", "two", "bound")
_PAYLOADS = {"16B": "x" * 16, "2KB": "x" * 2048}


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {mode}")
    return conn


def _layout(conn: sqlite3.Connection, layout: str, path: Path) -> None:
    schema.migrate(conn, str(path))
    if layout == "current":
        return
    ddl = [
        row[0]
        for row in conn.execute("SELECT sql FROM sqlite_master WHERE tbl_name = 'tasks' AND sql IS NOT NULL")
        if not row[0].startswith("CREATE TABLE")
    ]
    (table,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'tasks'").fetchone()
    if layout == "norowid":
        table = _swap(table, "seq INTEGER PRIMARY KEY", "seq INTEGER NOT NULL")
        table = _swap(table, "id TEXT NOT NULL UNIQUE", "id TEXT PRIMARY KEY") + " WITHOUT ROWID"
    else:
        table = _swap(table, "id TEXT NOT NULL UNIQUE", "id TEXT NOT NULL")
        if layout == "bound":
            ddl = [sql for sql in ddl if "tasks_order" not in sql]
    conn.execute("DROP TABLE tasks")
    for sql in (table, *ddl):
        conn.execute(sql)


def _swap(sql: str, old: str, new: str) -> str:
    """``sql`` with ``old`` replaced: it must be there (the broker's statements may have changed)."""
    if old not in sql:
        raise ValueError(f"{old!r} is not in {sql!r}")
    return sql.replace(old, new)


def _timed(count: int, call: Callable[[int], object]) -> tuple[float, float]:
    """Wall and thread CPU microseconds per call of ``call(i)``, ``i`` in ``range(count)``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(count):
        call(i)
    return (time.perf_counter() - wall) / count * 1e6, (time.thread_time() - cpu) / count * 1e6


def _bare(path: Path, mode: str, count: int) -> tuple[float, float]:
    conn = _connect(path, mode)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")

    def call(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (str(i),))
        conn.execute("COMMIT")

    try:
        return _timed(count, call)
    finally:
        conn.close()


def _run(path: Path, mode: str, layout: str, payload: str, count: int) -> dict[str, tuple[float, float]]:
    conn = _connect(path, mode)
    _layout(conn, layout, path)
    key = "id" if layout == "norowid" else "seq"
    usable = layout in ("current", "norowid")
    insert = ops._INSERT_NEW_TASK if usable else ops._INSERT_TASK
    if layout == "norowid":
        insert = _swap(_swap(insert, "(id, name,", "(seq, id, name,"), "VALUES (?,", "VALUES (?, ?,")
    body = f'{{"args":["{payload}"],"kwargs":{{}}}}'

    def enqueue(i: int) -> None:
        now = time.time()
        row = (os.urandom(16).hex(), "noop", "default", "pending", body, "{}", 0, now, now, None, None, None, now, now)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(ops._PRELUDE, (now, "origin", "default")).fetchone()
        conn.execute(insert, (i + 1, *row) if layout == "norowid" else row)
        conn.execute("COMMIT")

    ready = _swap(ops._READY, "SELECT seq", f"SELECT {key}")
    update = _swap(ops._claim_sql(1), "WHERE seq IN", f"WHERE {key} IN")
    fences = f"{ops._FENCES} (?)"
    complete = _swap(ops._COMPLETE, "WHERE seq = ?", f"WHERE {key} = ?")
    due = (  # as ``Tx.anything_due``
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE next_run_at <= ?)"
        " OR EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at <= ?)"
        " OR EXISTS (SELECT 1 FROM tasks WHERE expires_at <= ? AND expires_at IS NOT NULL"
        " AND state IN ('pending', 'scheduled', 'retry'))"
    )
    claimed: list[tuple[str, str]] = []

    def claim(_: int) -> None:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(due, (now, now, now)).fetchone()
        keys = [row[0] for row in conn.execute(ready, ("default", 1))]
        row = conn.execute(update, (now, now, "token-", now + 60, *keys)).fetchone()
        conn.execute("COMMIT")
        claimed.append((row[1], row[10]))

    def settle(i: int) -> None:
        task_id, token = claimed[i]
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        _, seq, _, stored = conn.execute(fences, (task_id,)).fetchone()
        assert stored == token
        conn.execute(complete, ops._COMPLETE_ROW((now, now + 3600, "null", task_id if key == "id" else seq)))
        conn.execute("COMMIT")

    try:
        result = {"enqueue": _timed(count, enqueue)}
        if usable:
            result["claim"] = _timed(count, claim)
            result["settle"] = _timed(count, settle)
        return result
    finally:
        conn.close()


def _app(directory: Path, mode: str, payload: str, count: int) -> dict[str, tuple[float, float]]:
    app = Conveyor(f"sqlite:///{directory}/app.db?synchronous={mode}")
    task = app.task(name="noop")(lambda data: None)
    try:
        return {"enqueue": _timed(count, lambda _: task.enqueue(payload))}
    finally:
        app.close()


def measure(directory: Path, count: int, mode: str, payload: str) -> list[str]:
    """One pass at one mode and payload size: a line per layout, then the app's."""
    lines = []
    for layout in (*LAYOUTS, "app"):
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            bare = _bare(Path(tmp) / "bare.db", mode, count)
            if layout == "app":
                got = _app(Path(tmp), mode, _PAYLOADS[payload], count)
            else:
                got = _run(Path(tmp) / "tasks.db", mode, layout, _PAYLOADS[payload], count)
        enq = got["enqueue"]
        cells = [f"bare {bare[0]:.1f}/{bare[1]:.1f}"]
        cells += [f"{name} {wall:.1f}/{cpu:.1f}" for name, (wall, cpu) in got.items()]
        cells.append(f"enqueue/bare {enq[0] / bare[0]:.2f}x/{enq[1] / bare[1]:.2f}x")
        lines.append(f"{mode} {payload} {layout:8} " + "  ".join(cells))
    return lines


if __name__ == "__main__":
    directory, count, passes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    print("per call, wall/CPU us")
    for number in range(passes):
        for mode in ("NORMAL", "FULL"):
            for payload in _PAYLOADS:
                for line in measure(directory, count if mode == "NORMAL" else max(count // 10, 50), mode, payload):
                    print(f"pass {number + 1} {line}", flush=True)
