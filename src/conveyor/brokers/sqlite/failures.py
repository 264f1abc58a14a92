"""How ``sqlite3``'s exceptions leave the SQLite broker: as :mod:`conveyor.errors` types, busy ones told apart."""

from __future__ import annotations

import sqlite3

from conveyor.errors import BrokerError, BrokerUnavailable

__all__ = ["is_busy", "translate"]


def is_busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    message = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


def translate(exc: sqlite3.Error, path: str) -> BrokerError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_READONLY"):
        return BrokerError(f"{path} is read-only: {exc}")
    if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
        return BrokerError(f"{path} is not a valid SQLite database or is corrupt: {exc}")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_PROTOCOL")):
        return BrokerUnavailable(f"{path} cannot be read or written: {exc}")
    return BrokerError(f"SQLite error on {path}: {exc}")
