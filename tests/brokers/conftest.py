"""Two SQLite broker objects on one file, as two processes (or a worker's fetcher and acker) hold; and
the re-sent call tests' cutting proxy and key layouts (``resent.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.model import BrokerPolicy
from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer

from .cutting_proxy import CuttingProxy
from .resent import LAYOUTS, proxied_cluster


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "conveyor.db"


@pytest.fixture
def open_sqlite(db_path: Path) -> Iterator[Callable[..., SQLiteBroker]]:
    """Brokers on ``db_path`` (query options as keywords), each as another process would hold it (its
    own origin); all are closed after the test."""
    opened: list[SQLiteBroker] = []

    def factory(**options: object) -> SQLiteBroker:
        query = "&".join(f"{key}={value}" for key, value in options.items())
        broker = SQLiteBroker.from_url(f"sqlite:///{db_path}?{query}", BrokerPolicy())
        opened.append(broker)
        return broker

    yield factory
    for broker in opened:
        broker.close()


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


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[CuttingProxy]:
    """A proxy in front of the session's server that can drop a reply (``cutting_proxy.py``)."""
    with CuttingProxy("127.0.0.1", redis_server.port) as started:
        yield started


@pytest.fixture(params=LAYOUTS)
def layout(request: pytest.FixtureRequest) -> str:
    """The key layouts the re-sent call tests run in (``resent.LAYOUTS``)."""
    return str(request.param)


@pytest.fixture
def cluster_proxies(redis_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CuttingProxy]]:
    """A cutting proxy in front of each node of the session's cluster, which the cluster client is
    pointed at (``resent.proxied_cluster``)."""
    with proxied_cluster(redis_cluster, monkeypatch) as proxies:
        yield proxies
