"""Every dashboard action, POSTed with a valid CSRF token, changes the broker and redirects back."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from conveyor import Conveyor, TaskNotFound, TaskState

if TYPE_CHECKING:
    from starlette.testclient import TestClient

Csrf = Callable[..., str]


@pytest.fixture
def archived_id(app: Conveyor) -> str:
    @app.task(max_retries=0)
    def explode() -> None:
        raise RuntimeError("down")

    handle = explode.enqueue()
    app.worker().run_until_idle()
    assert handle.status().state == TaskState.ARCHIVED
    return handle.id


def test_run_now_retries_an_archived_task(client: TestClient, app: Conveyor, csrf: Csrf, archived_id: str) -> None:
    token = csrf(client, f"/tasks/{archived_id}")
    done = client.post(f"/tasks/{archived_id}/run-now", data={"csrf": token, "next": f"/tasks/{archived_id}"})
    assert done.status_code == 303
    assert done.headers["location"] == f"/tasks/{archived_id}?done=run-now&n=1"
    assert app.get(archived_id).state == TaskState.PENDING
    assert "queued to run now: 1 task(s)" in client.get(done.headers["location"]).text


@pytest.mark.parametrize(("action", "reason"), [("archive", "manual"), ("cancel", "cancelled")])
def test_archive_and_cancel_a_pending_task(
    client: TestClient, app: Conveyor, csrf: Csrf, action: str, reason: str
) -> None:
    task_id = app.enqueue("job").id
    done = client.post(f"/tasks/{task_id}/{action}", data={"csrf": csrf(client)})
    assert done.status_code == 303
    info = app.get(task_id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, reason)


def test_delete_removes_the_task_and_returns_to_its_queue(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job", queue="mail").id
    done = client.post(f"/tasks/{task_id}/delete", data={"csrf": csrf(client), "next": f"/tasks/{task_id}"})
    assert done.status_code == 303 and done.headers["location"].startswith("/queues/mail?")
    with pytest.raises(TaskNotFound):
        app.get(task_id)


def test_an_action_that_does_not_apply_says_why(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job").id
    refused = client.post(f"/tasks/{task_id}/run-now", data={"csrf": csrf(client)})
    assert refused.status_code == 409 and "run-now:" in refused.text
    assert app.get(task_id).state == TaskState.PENDING


def test_pause_and_resume_a_queue(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    app.enqueue("job", queue="mail")
    token = csrf(client)
    assert client.post("/queues/mail/pause", data={"csrf": token}).status_code == 303
    assert [q.settings.paused for q in app.inspect.queues() if q.name == "mail"] == [True]
    assert client.post("/queues/mail/resume", data={"csrf": token}).status_code == 303
    assert [q.settings.paused for q in app.inspect.queues() if q.name == "mail"] == [False]


@pytest.mark.parametrize("action", ["pause", "resume", "purge"])
def test_a_queue_action_on_an_unknown_queue_makes_no_queue(
    client: TestClient, app: Conveyor, csrf: Csrf, action: str
) -> None:
    """Resume (from a stale page, or a forged form) made the queue it named."""
    app.enqueue("job")
    refused = client.post(f"/queues/typo-queue/{action}", data={"csrf": csrf(client), "state": "pending"})
    assert refused.status_code == 409 and "queue not found: &#39;typo-queue&#39;" in refused.text
    assert [q.name for q in app.inspect.queues()] == ["default"]


def test_purge_deletes_one_state_of_a_queue(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    for _ in range(3):
        app.enqueue("job", delay=60)
    app.enqueue("job")
    done = client.post("/queues/default/purge", data={"csrf": csrf(client), "state": "scheduled"})
    assert done.status_code == 303 and "n=3" in done.headers["location"]
    assert app.stats()["default"]["scheduled"] == 0 and app.stats()["default"]["pending"] == 1


def test_purge_of_an_unknown_state_is_refused(client: TestClient, csrf: Csrf) -> None:
    assert client.post("/queues/default/purge", data={"csrf": csrf(client), "state": "bogus"}).status_code == 409


def test_bulk_action_applies_to_the_selection_and_counts_failures(
    client: TestClient, app: Conveyor, csrf: Csrf
) -> None:
    ids = [app.enqueue("job").id for _ in range(4)]
    form = {"csrf": csrf(client), "action": "archive", "ids": [ids[0], ids[1], "missing"]}
    done = client.post("/queues/default/bulk", data=form)
    assert done.status_code == 303
    assert "done=archive" in done.headers["location"] and "n=2" in done.headers["location"]
    assert "failed=1" in done.headers["location"]
    assert [app.get(i).state for i in ids] == ["archived", "archived", "pending", "pending"]


def test_bulk_delete(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    ids = [app.enqueue("job").id for _ in range(3)]
    client.post("/queues/default/bulk", data={"csrf": csrf(client), "action": "delete", "ids": ids[:2]})
    assert app.stats()["default"]["total"] == 1


def test_next_outside_the_dashboard_is_ignored(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job").id
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        other = app.enqueue("job").id
        done = client.post(f"/tasks/{other}/archive", data={"csrf": csrf(client), "next": target})
        assert done.headers["location"].startswith(f"/tasks/{other}?"), target
    assert app.get(task_id).state == TaskState.PENDING


def test_bulk_failures_say_why(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    task_id = app.enqueue("job").id
    form = {"csrf": csrf(client), "action": "archive", "ids": [task_id, "missing"]}
    done = client.post("/queues/default/bulk", data=form)
    page = client.get(done.headers["location"])
    assert "archived: 1 task(s); 1 could not be changed (task not found: &#39;missing&#39;)" in page.text


@pytest.mark.parametrize(
    ("state", "buttons"),
    [
        ("pending", ["archive", "cancel", "delete"]),
        ("scheduled", ["run-now", "archive", "cancel", "delete"]),
        ("active", ["cancel"]),
        ("completed", ["delete"]),
        ("archived", ["run-now", "delete"]),
    ],
)
def test_bulk_buttons_are_only_those_that_apply_to_the_state(
    client: TestClient, app: Conveyor, state: str, buttons: list[str]
) -> None:
    @app.task
    def job() -> None: ...

    app.enqueue("job", delay=60 if state == "scheduled" else None)
    if state == "active":
        app.claim()
    elif state == "completed":
        app.worker().run_until_idle()
    elif state == "archived":
        app.inspect.archive(app.inspect.list("default", "pending")[0].id)
    page = client.get(f"/queues/default?state={state}").text
    assert re.findall(r'name="action" value="([a-z-]+)"', page) == buttons
