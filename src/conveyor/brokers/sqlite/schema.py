"""The database layout, its version (``PRAGMA user_version``) and the migrations between versions.

``tasks.seq`` (the rowid) is the enqueue sequence. ``tasks.sort_key`` is the task's order key *within
its state*, so one index ``(queue, state, sort_key, seq)`` serves claims and every ``list_tasks``
page: ``ready_key()`` while pending, ``next_run_at`` while scheduled/retry, ``started_at`` while
active, ``finished_at`` once completed/archived. Partial indexes cover the time-driven sweeps
(due, lease expiry, retention, ``expires``) so each sweep reads only what is due.

``events`` is written only while some broker object is subscribed (it holds a row in ``listeners``,
refreshed by its poller with wall-clock liveness), so a file nobody watches pays nothing for events.
``uniques`` mirrors the reference broker's "current holder of a unique key" map; a trigger drops the
entry when its holder row is deleted. ``queues`` rowids keep the order in which queues became known.
``history`` holds the per-minute counters of settled executions (``conveyor.history``; version 2), one
row per minute and queue, written by ``settle`` in its transaction and pruned by ``clean``. Version 2
also adds ``tasks.max_retries``: the retry limit the task's latest failed execution ran with. Version 5
adds ``tasks.traceback``: the bounded traceback of the task's latest failed execution (NULL for tasks
that never failed, so a success writes nothing more). Version 6 adds ``queues.partitions``. Version 7
adds ``inbox`` (``inbox.py``): one-task enqueues not yet folded into ``tasks``; an older Conveyor,
which would not see them, refuses the file.
"""

from __future__ import annotations

import sqlite3

from conveyor.errors import ConfigurationError, SchemaError

__all__ = ["SCHEMA_VERSION", "migrate"]

#: The layout this code reads and writes. A file with a higher ``user_version`` is refused.
SCHEMA_VERSION = 7

_V1 = (
    """
    CREATE TABLE tasks (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        queue TEXT NOT NULL,
        state TEXT NOT NULL,
        payload TEXT NOT NULL,
        options TEXT NOT NULL,
        priority INTEGER NOT NULL,
        enqueued_at REAL NOT NULL,
        first_due_at REAL NOT NULL,
        next_run_at REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        retries INTEGER NOT NULL DEFAULT 0,
        stalls INTEGER NOT NULL DEFAULT 0,
        expires_at REAL,
        unique_key TEXT,
        started_at REAL,
        finished_at REAL,
        keep_until REAL,
        last_error TEXT,
        archive_reason TEXT,
        result TEXT,
        errors TEXT NOT NULL DEFAULT '[]',
        lease_token TEXT,
        lease_expires_at REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        ready_at REAL NOT NULL,
        sort_key REAL NOT NULL
    )
    """,
    "CREATE INDEX tasks_order ON tasks (queue, state, sort_key, seq)",
    "CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE next_run_at IS NOT NULL",
    "CREATE INDEX tasks_lease ON tasks (lease_expires_at, seq) WHERE lease_expires_at IS NOT NULL",
    "CREATE INDEX tasks_keep ON tasks (keep_until, seq) WHERE keep_until IS NOT NULL",
    """
    CREATE INDEX tasks_expiring ON tasks (expires_at, seq)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'scheduled', 'retry')
    """,
    "CREATE TABLE uniques (key TEXT PRIMARY KEY, task_id TEXT NOT NULL, until REAL NOT NULL) WITHOUT ROWID",
    """
    CREATE TRIGGER tasks_release_unique AFTER DELETE ON tasks WHEN old.unique_key IS NOT NULL
    BEGIN
        DELETE FROM uniques WHERE key = old.unique_key AND task_id = old.id;
    END
    """,
    """
    CREATE TABLE queues (
        name TEXT NOT NULL UNIQUE,
        max_size INTEGER,
        concurrency INTEGER,
        aging REAL,
        paused INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE TABLE workers (id TEXT PRIMARY KEY, info TEXT NOT NULL, until REAL NOT NULL) WITHOUT ROWID",
    "CREATE TABLE listeners (origin TEXT PRIMARY KEY, until REAL NOT NULL) WITHOUT ROWID",
    """
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        origin TEXT NOT NULL,
        task_id TEXT NOT NULL,
        old_state TEXT,
        new_state TEXT NOT NULL,
        queue TEXT NOT NULL,
        at REAL NOT NULL
    )
    """,
)

_V2 = (
    """
    CREATE TABLE history (
        minute INTEGER NOT NULL,
        queue TEXT NOT NULL,
        completed INTEGER NOT NULL DEFAULT 0,
        retried INTEGER NOT NULL DEFAULT 0,
        archived INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (minute, queue)
    ) WITHOUT ROWID
    """,
    "ALTER TABLE tasks ADD COLUMN max_retries INTEGER",
)

#: Version 3: the task declarations workers publish (``conveyor.declared``), JSON by task name.
_V3 = ("CREATE TABLE declared (name TEXT PRIMARY KEY, declaration TEXT NOT NULL) WITHOUT ROWID",)

#: Version 4: operators' commands to workers (``conveyor.commands``).
_V4 = ("CREATE TABLE worker_commands (id TEXT PRIMARY KEY, command TEXT NOT NULL, until REAL NOT NULL) WITHOUT ROWID",)

#: Version 5: the traceback of a task's latest failed execution (``TaskRecord.traceback``).
_V5 = ("ALTER TABLE tasks ADD COLUMN traceback TEXT",)

#: Version 6: a queue's ``partitions`` (``QueueSettings``), stored and reported; SQLite keeps the queue one.
_V6 = ("ALTER TABLE queues ADD COLUMN partitions INTEGER NOT NULL DEFAULT 1",)

#: Version 7: one-task enqueues not yet folded into ``tasks`` (``inbox.py``; ``n``: their commit order).
_V7 = (
    """
    CREATE TABLE inbox (
        n INTEGER PRIMARY KEY,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        queue TEXT NOT NULL,
        state TEXT NOT NULL,
        payload TEXT NOT NULL,
        options TEXT NOT NULL,
        priority INTEGER NOT NULL,
        enqueued_at REAL NOT NULL,
        first_due_at REAL NOT NULL,
        next_run_at REAL,
        expires_at REAL,
        ready_at REAL NOT NULL
    )
    """,
)

#: ``MIGRATIONS[v]`` takes a database from version ``v`` to ``v + 1``.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
assert len(MIGRATIONS) == SCHEMA_VERSION


def stored_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def check_version(version: int, path: str) -> None:
    """Refuse a file written by a newer Conveyor (before anything touches it)."""
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{path}: schema version {version} is newer than this Conveyor understands ({SCHEMA_VERSION});"
            " upgrade Conveyor. The file was left untouched."
        )


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the schema up to :data:`SCHEMA_VERSION` in one write transaction (all or nothing).

    ``conn`` must be in autocommit mode. Several processes may race here: the version is re-read
    under the write lock, so only one of them migrates.
    """
    if stored_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = stored_version(conn)
        check_version(version, path)
        if version == 0:
            foreign = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' LIMIT 1"
            ).fetchone()
            if foreign is not None:
                raise ConfigurationError(
                    f"{path} is an SQLite database of another application (it has table {foreign[0]!r}"
                    " but no Conveyor schema); point the URL at a new or Conveyor file"
                )
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
