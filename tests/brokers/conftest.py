"""Two SQLite broker objects on one file, as two processes (or a worker's fetcher and acker) hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "conveyor.db"


def _opened(db_path: Path) -> Iterator[SQLiteBroker]:
    broker = SQLiteBroker.from_url(f"sqlite:///{db_path}", BrokerPolicy())
    yield broker
    broker.close()


@pytest.fixture
def consumer(db_path: Path) -> Iterator[SQLiteBroker]:
    """The one that claims and waits for work."""
    yield from _opened(db_path)


@pytest.fixture
def producer(db_path: Path) -> Iterator[SQLiteBroker]:
    """Another connection that enqueues and settles."""
    yield from _opened(db_path)
