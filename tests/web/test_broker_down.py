"""The dashboard while its broker does not answer: every page says so with 503, never a 500."""

from __future__ import annotations

import pytest

from conveyor import Conveyor
from conveyor.testing.redis_server import RedisServer
from conveyor.web import create_app

from .conftest import TestClient

PAGES = ["/", "/workers", "/search?q=boom", "/failed", "/queues/default", "/tasks/t-1", "/metrics/view"]


def test_every_page_says_the_broker_is_down_with_503() -> None:
    server = RedisServer().start()
    app = Conveyor(f"{server.url}?socket_connect_timeout=0.2&socket_timeout=0.5&retries=0")
    try:
        app.enqueue("job", task_id="t-1")
        client = TestClient(create_app(app), follow_redirects=False)
        assert client.get("/").status_code == 200
        server.stop()
        for path in PAGES:
            page = client.get(path)
            if path == "/metrics/view" and page.status_code == 200:
                continue  # the process's own metrics: no broker call, nothing to refuse
            assert page.status_code == 503, (path, page.status_code, page.text[:300])
            assert "the broker did not answer" in page.text, path
        api = client.get("/api/overview")
        assert api.status_code == 503 and api.json()["error"].startswith("the broker did not answer"), api.text
        assert client.get("/healthz").status_code == 503
    finally:
        app.close()
        server.stop()


@pytest.mark.parametrize("path", ["/queues/default/pause", "/tasks/t-1/run-now"])
def test_an_action_while_the_broker_is_down_is_503(path: str) -> None:
    server = RedisServer().start()
    app = Conveyor(f"{server.url}?socket_connect_timeout=0.2&socket_timeout=0.5&retries=0")
    try:
        app.enqueue("job", task_id="t-1")
        client = TestClient(create_app(app), follow_redirects=False)
        page = client.get("/")
        token = page.text.split('data-csrf="')[1].split('"')[0]
        server.stop()
        done = client.post(path, data={"csrf": token})
        assert done.status_code == 503 and "the broker did not answer" in done.text, done.text[:300]
    finally:
        app.close()
        server.stop()
