"""A group commit's writes (``Database.write``): the writes of one process's threads queued behind one
another, made in one transaction, each in a savepoint of its own."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from conveyor.brokers.sqlite.failures import is_busy, translate

__all__ = ["Write", "apply_group"]


class Write:
    """One call of :meth:`Database.write`, made by whichever thread holds the write lock first."""

    __slots__ = ("done", "durable", "error", "fn", "fold", "result")

    def __init__(self, fn: Callable[[sqlite3.Connection], object], durable: bool, fold: bool) -> None:
        self.fn = fn
        self.durable = durable
        self.fold = fold
        self.done = False
        self.result: object = None
        self.error: BaseException | None = None

    def outcome(self) -> object:
        if self.error is not None:
            raise self.error
        return self.result


def apply_group(conn: sqlite3.Connection, group: list[Write], path: str) -> None:
    """Run each write of ``group`` in a savepoint: one that raises leaves no trace and gets its error,
    the others go on. A busy file, or a savepoint that cannot be rolled back, fails the whole group."""
    for number, write in enumerate(group):
        conn.execute(f"SAVEPOINT w{number}")
        try:
            write.result, write.error = write.fn(conn), None
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) and is_busy(exc):
                raise
            conn.execute(f"ROLLBACK TO w{number}")
            write.result = None
            write.error = translate(exc, path) if isinstance(exc, sqlite3.Error) else exc
        conn.execute(f"RELEASE w{number}")
