"""The workers page: live workers with the tasks they run, and the quiet / stop commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor import Conveyor
from conveyor.model import WorkerInfo

if TYPE_CHECKING:
    from starlette.testclient import TestClient

Csrf = Callable[..., str]


def _worker(app: Conveyor, running: tuple[str, ...] = ()) -> str:
    info = WorkerInfo("web-1:42:ab", "web-1", 42, ("default",), 4, app.now() - 90, running=running, processed=7)
    app.broker.register_worker(info, app.now(), ttl=60)
    return info.id


def test_workers_page_lists_running_tasks_with_names_and_args(client: TestClient, app: Conveyor) -> None:
    running = app.enqueue("resize_image", args=("/uploads/a.jpg",), kwargs={"width": 640})
    app.broker.claim(["default"], app.now(), 60)
    wid = _worker(app, (running.id, "settled-meanwhile"))
    page = client.get("/workers")
    assert page.status_code == 200
    assert f'data-worker="{wid}"' in page.text and "processed 7" in page.text and "up 1m30s" in page.text
    assert f'href="/tasks/{running.id}"' in page.text and "resize_image" in page.text
    assert "&#34;/uploads/a.jpg&#34;, width=640" in page.text
    assert 'href="/tasks/settled-meanwhile"' in page.text  # unknown now: listed by id
    assert 'action="/workers/web-1%3A42%3Aab/quiet"' in page.text and "/stop" in page.text


def test_quiet_then_stop_from_the_page(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    wid = _worker(app)
    token = csrf(client, "/workers")
    done = client.post(f"/workers/{wid}/quiet", data={"csrf": token, "next": "/workers"})
    assert done.status_code == 303 and done.headers["location"] == "/workers?done=quiet"
    assert app.inspect.worker_command(wid) == "quiet"
    page = client.get(done.headers["location"]).text
    assert "worker told to stop claiming" in page and '<span class="badge cmd-quiet">quiet</span>' in page
    assert f"/workers/{wid.replace(':', '%3A')}/quiet" not in page  # already quiet: only Stop is offered
    client.post(f"/workers/{wid}/stop", data={"csrf": token})
    assert app.inspect.worker_command(wid) == "stop"
    assert '<span class="badge cmd-stop">stopping</span>' in client.get("/workers").text


def test_commands_are_checked(
    client: TestClient, make_client: Callable[..., TestClient], app: Conveyor, csrf: Csrf
) -> None:
    wid = _worker(app)
    assert client.post(f"/workers/{wid}/stop", data={}).status_code == 403  # no CSRF token
    token = csrf(client, "/workers")
    assert client.post(f"/workers/{wid}/pause", data={"csrf": token}).status_code == 404
    gone = client.post("/workers/ghost/stop", data={"csrf": token})
    assert gone.status_code == 409 and "no live worker" in gone.text
    read_only = make_client(read_only=True)
    assert "/stop" not in read_only.get("/workers").text
    assert read_only.post(f"/workers/{wid}/stop", data={"csrf": csrf(read_only, "/workers")}).status_code == 403
    assert app.inspect.worker_command(wid) is None
