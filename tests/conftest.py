"""Fixtures shared by the whole suite: one FakeClock, and a broker URL per backend.

``broker_url`` is parametrized over every backend; a test that takes it (or ``app``) runs once per
backend. The Redis backend gets a private server (started once per session on a free loopback port,
stopped by PID) and a fresh namespace per test.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock

pytest_plugins = ["conveyor.testing.pytest_plugin"]

BACKENDS = ["memory", "sqlite", "redis"]


def _available(backend: str) -> bool:
    module = {
        "memory": "conveyor.brokers.memory",
        "sqlite": "conveyor.brokers.sqlite",
        "redis": "conveyor.brokers.redis",
    }
    spec = importlib.util.find_spec(module[backend])
    return spec is not None and spec.origin is not None  # a package still without __init__.py is not built


#: Fixtures of the session's private Redis Cluster (three servers, about two seconds to build per test
#: process), and the conformance suite's parameter that runs on it.
CLUSTER_FIXTURES = frozenset({"redis_cluster", "redis_cluster_url"})
CLUSTER_BACKEND = "redis-cluster"
#: The benchmark harness's smoke runs: processes of their own, but asserting what a run reports, never
#: how fast it went, so ``make test`` spreads them over processes with the quick tests.
SPREAD_DIRS = (Path(__file__).parent / "bench",)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the mark must be there by then
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the Redis Cluster is ``slow`` (servers of the session's own, started for it), so
    ``make unit-fast`` leaves them to ``make test``; the benchmarks' tests are ``spread``. Marked here,
    in one place, not test by test."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_cluster = callspec is not None and callspec.params.get("broker_url") == CLUSTER_BACKEND
        if on_cluster or CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if any(item.path.is_relative_to(directory) for directory in SPREAD_DIRS):
            item.add_marker(pytest.mark.spread)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture(params=BACKENDS)
def broker_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request, request.param, tmp_path)


@pytest.fixture
def url_of_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """``url_of_backend(backend)``: what ``broker_url`` gives for ``backend``, for a conftest that
    parametrizes ``broker_url`` over other backends (the conformance suite adds ``redis-cluster``)."""
    return lambda backend: backend_url(request, backend, tmp_path)


def backend_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    """A fresh broker URL of ``backend`` for the requesting test (``redis-cluster``: a namespace on the
    session's 3-master cluster)."""
    if backend == "redis-cluster":
        backend = "redis"
        if not _available(backend):
            pytest.skip(f"{backend} broker not built yet")
        cluster_url: str = request.getfixturevalue("redis_cluster_url")
        return cluster_url
    if not _available(backend):
        pytest.skip(f"{backend} broker not built yet")
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'conveyor.db'}"
    url: str = request.getfixturevalue("redis_url")
    return url


@pytest.fixture
def app(broker_url: str, clock: FakeClock) -> Iterator[Conveyor]:
    application = Conveyor(broker_url, clock=clock)
    try:
        yield application
    finally:
        application.close()
