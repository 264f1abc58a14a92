"""The dashboard's defences: CSRF, POST-only actions, authentication, escaping, CSP, read-only mode."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from conveyor import Conveyor, TaskState
from conveyor.model import WorkerInfo

if TYPE_CHECKING:
    from starlette.testclient import TestClient

Csrf = Callable[..., str]
XSS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


def test_action_without_csrf_token_is_refused(client: TestClient, app: Conveyor) -> None:
    task_id = app.enqueue("job").id
    client.get("/")  # the browser has its cookie, but the form lacks the token
    refused = client.post(f"/tasks/{task_id}/archive", data={})
    assert refused.status_code == 403
    assert app.get(task_id).state == TaskState.PENDING


def test_action_with_a_forged_csrf_token_is_refused(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job").id
    token = csrf(client)
    forged = token[:-1] + ("1" if token.endswith("0") else "0")  # one character off, never the token itself
    assert client.post(f"/tasks/{task_id}/archive", data={"csrf": forged}).status_code == 403
    assert app.get(task_id).state == TaskState.PENDING


def test_csrf_token_is_bound_to_the_browser_cookie(
    make_client: Callable[..., TestClient], app: Conveyor, csrf: Csrf
) -> None:
    from conveyor.web import create_app

    web = create_app(app)
    attacker, victim = make_client(web), make_client(web)
    stolen = csrf(attacker)  # valid for the attacker's own cookie only
    victim.get("/")
    task_id = app.enqueue("job").id
    assert victim.post(f"/tasks/{task_id}/archive", data={"csrf": stolen}).status_code == 403


def test_cross_origin_post_is_refused(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job").id
    token = csrf(client)
    refused = client.post(f"/tasks/{task_id}/archive", data={"csrf": token}, headers={"origin": "https://evil.example"})
    assert refused.status_code == 403
    assert app.get(task_id).state == TaskState.PENDING


@pytest.mark.parametrize(
    "path", ["/tasks/{id}/archive", "/tasks/{id}/delete", "/queues/default/pause", "/queues/default/purge"]
)
def test_get_cannot_change_anything(client: TestClient, app: Conveyor, path: str) -> None:
    task_id = app.enqueue("job").id
    response = client.get(path.format(id=task_id) + "?state=pending")
    assert response.status_code == 405
    assert app.get(task_id).state == TaskState.PENDING
    assert not app.inspect.queues()[0].settings.paused


def test_token_is_required_when_set(make_client: Callable[..., TestClient]) -> None:
    client = make_client(token="s3cret")
    assert client.get("/").status_code == 401
    assert client.get("/api/overview").status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # health checks need no secret


def test_token_in_the_url_once_becomes_a_cookie(make_client: Callable[..., TestClient], app: Conveyor) -> None:
    app.enqueue("job")  # the queue exists
    client = make_client(token="s3cret")
    first = client.get("/queues/default?state=retry&token=s3cret")
    assert first.status_code == 303 and first.headers["location"] == "/queues/default?state=retry"
    assert "httponly" in first.headers["set-cookie"].lower()
    assert client.get("/queues/default?state=retry").status_code == 200


def test_actions_need_the_token_too(make_client: Callable[..., TestClient], app: Conveyor) -> None:
    client = make_client(token="s3cret")
    task_id = app.enqueue("job").id
    assert client.post(f"/tasks/{task_id}/archive", data={"csrf": "x"}).status_code == 401
    assert app.get(task_id).state == TaskState.PENDING


def test_basic_auth(make_client: Callable[..., TestClient]) -> None:
    client = make_client(basic_auth=("admin", "pw"))
    challenge = client.get("/")
    assert challenge.status_code == 401 and challenge.headers["www-authenticate"].startswith("Basic")

    def auth(user: str, password: str) -> dict[str, str]:
        return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    assert client.get("/", headers=auth("admin", "nope")).status_code == 401
    assert client.get("/", headers=auth("root", "pw")).status_code == 401
    assert client.get("/", headers={"authorization": "Basic !!!"}).status_code == 401
    assert client.get("/", headers=auth("admin", "pw")).status_code == 200


def _assert_inert(html: str) -> None:
    for payload in XSS:
        assert payload not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html


def test_task_controlled_strings_render_inert(client: TestClient, app: Conveyor) -> None:
    @app.task(name="xss", max_retries=0)
    def handler(a: str, b: str) -> None:
        raise ValueError(XSS[0] + XSS[1])

    handle = handler.enqueue(XSS[0], b=XSS[1])
    app.worker().run_until_idle()
    _assert_inert(client.get(f"/tasks/{handle.id}").text)
    _assert_inert(client.get("/queues/default?state=archived").text)


def test_worker_strings_render_inert(client: TestClient, app: Conveyor) -> None:
    worker = WorkerInfo("w1", XSS[0] + XSS[1], 1, ("default",), 1, app.now(), app.now())
    app.broker.register_worker(worker, app.now(), ttl=60)
    _assert_inert(client.get("/").text)


def test_search_echo_renders_inert(client: TestClient) -> None:
    page = client.get("/search", params={"id": XSS[0]})
    assert XSS[0] not in page.text and "&lt;script&gt;" in page.text
    _assert_inert(client.get("/search", params={"q": XSS[0] + XSS[1]}).text)


def test_new_pages_render_task_and_filter_strings_inert(client: TestClient, app: Conveyor) -> None:
    @app.task(name="xss", max_retries=0)
    def handler(a: str) -> None:
        raise ValueError(XSS[0] + XSS[1])

    handler.enqueue(XSS[1])
    app.worker().run_until_idle()
    worker = WorkerInfo(XSS[1], XSS[0], 1, ("default",), 1, app.now(), app.now())
    app.broker.register_worker(worker, app.now(), ttl=60)
    _assert_inert(client.get("/failed").text)
    _assert_inert(client.get("/failed", params={"name": XSS[0], "error": XSS[1]}).text)
    _assert_inert(client.get("/search", params={"q": "alert"}).text)
    _assert_inert(client.get("/workers").text)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/queues/default",
        "/tasks/missing",
        "/api/overview",
        "/static/app.js",
        "/x",
        "/failed",
        "/workers",
        "/metrics/view",
    ],
)
def test_every_response_carries_a_strict_csp(client: TestClient, path: str) -> None:
    headers = client.get(path).headers
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_pages_have_no_inline_script(client: TestClient, app: Conveyor) -> None:
    task_id = app.enqueue("job").id
    for path in ("/", "/queues/default", f"/tasks/{task_id}"):
        html = client.get(path).text
        assert html.count("<script") == 1 and '<script src="/static/app.js" defer></script>' in html
        assert " onclick=" not in html and " onsubmit=" not in html


def test_read_only_mode_refuses_actions_and_hides_forms(
    make_client: Callable[..., TestClient], app: Conveyor, csrf: Csrf
) -> None:
    client = make_client(read_only=True)
    task_id = app.enqueue("job").id
    token = csrf(client)
    assert client.post(f"/tasks/{task_id}/archive", data={"csrf": token}).status_code == 403
    assert client.post("/queues/default/pause", data={"csrf": token}).status_code == 403
    assert (
        client.post("/queues/default/bulk", data={"csrf": token, "action": "delete", "ids": task_id}).status_code == 403
    )
    assert app.get(task_id).state == TaskState.PENDING
    for path in ("/", "/queues/default", f"/tasks/{task_id}"):
        assert 'method="post"' not in client.get(path).text
    assert "read-only" in client.get("/").text
