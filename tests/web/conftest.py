"""Fixtures for dashboard tests: a TestClient over ``create_app`` on the parametrized broker, the
Redis one on a server and on the session's 3-master Redis Cluster (``redis-cluster``), where the
dashboard's reads and actions gather from every master."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.exceptions import StarletteDeprecationWarning

from conveyor import Conveyor
from conveyor.web import create_app

with warnings.catch_warnings():
    # Starlette asks for the httpx2 fork; plain httpx (installed) works the same for these tests.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

__all__ = ["TestClient"]

XSS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
def broker_url(request: pytest.FixtureRequest, url_of_backend: Callable[[str], str]) -> str:
    return url_of_backend(request.param)


@pytest.fixture
def make_client(app: Conveyor) -> Iterator[Callable[..., TestClient]]:
    """``make_client(**create_app_kwargs)``: a started TestClient (lifespan run, closed at teardown)."""
    clients: list[TestClient] = []

    def make(web: Starlette | None = None, **kwargs: Any) -> TestClient:
        client = TestClient(web or create_app(app, **kwargs), follow_redirects=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


def csrf_token(client: TestClient, path: str = "/") -> str:
    """The CSRF token of a page's forms (loading it also sets the browser cookie)."""
    page = client.get(path)
    match = re.search(r'data-csrf="([^"]+)"', page.text)
    assert match, f"no CSRF token on {path}"
    return match.group(1)


@pytest.fixture
def csrf() -> Callable[..., str]:
    """``csrf(client, path="/")``: see :func:`csrf_token`."""
    return csrf_token
