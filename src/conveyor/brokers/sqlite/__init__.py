"""``sqlite:///path.db``: the embedded, durable default broker (see :mod:`.broker`)."""

from __future__ import annotations

from conveyor.brokers.sqlite.broker import SQLiteBroker
from conveyor.brokers.sqlite.config import SQLiteConfig

__all__ = ["SQLiteBroker", "SQLiteConfig"]
