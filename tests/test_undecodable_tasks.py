"""A stored task whose options, payload or error history no longer decode is shown as such, never an error: by
``status()``, ``inspect.list()``, ``conveyor ls / show / stats`` and the dashboard, on every broker.

The damage is written straight into each broker's storage (the memory store's dict, the SQLite file,
the Redis row), as a bug, a hand edit or another program would leave it.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import warnings
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from conveyor import ArchiveReason, Conveyor, TaskState
from conveyor.brokers.memory import MemoryBroker
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.codec import ROW_FIELDS, decode_body, encode_body
from conveyor.brokers.sqlite import SQLiteBroker
from conveyor.cli import cli as cli_group
from conveyor.cli.state import CliState
from conveyor.web import create_app

with warnings.catch_warnings():
    from starlette.exceptions import StarletteDeprecationWarning

    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

#: Damaged stored options: not JSON, not an object, a value of the wrong type, a built-in backoff
#: missing its fields, a backoff that is not an object, a backoff naming no kind.
BAD_OPTIONS = [
    '{"max_retries": 2',
    "[1, 2]",
    '{"max_retries": "many"}',
    '{"backoff": {"kind": "exponential"}}',
    '{"backoff": "linear"}',
    '{"backoff": {"step": 2}}',
]


def store_raw(app: Conveyor, task_id: str, *, options: str | None = None, payload: str | None = None) -> None:
    """Overwrite a stored task's options and/or payload text in the broker's own storage."""
    broker = app.broker
    if isinstance(broker, MemoryBroker):
        record = broker._tasks[task_id]
        broker._tasks[task_id] = dataclasses.replace(
            record, options=record.options if options is None else options, payload=payload or record.payload
        )
    elif isinstance(broker, SQLiteBroker):
        with sqlite3.connect(broker.config.path) as conn:
            if options is not None:
                conn.execute("UPDATE tasks SET options = ? WHERE id = ?", (options, task_id))
            if payload is not None:
                conn.execute("UPDATE tasks SET payload = ? WHERE id = ?", (payload, task_id))
        conn.close()
    else:
        assert isinstance(broker, RedisBroker)
        slot = broker.keys.slot(broker._task_prefix(task_id))  # its queue's (layout 5), found by id
        row = broker.client.hget(slot.rows, task_id)
        assert isinstance(row, (str, bytes))
        fields = (row.decode() if isinstance(row, bytes) else row).split(" ", ROW_FIELDS - 1)
        name, old_options, old_payload = decode_body(fields[-1])
        fields[-1] = encode_body(name, old_options if options is None else options, payload or old_payload)
        broker.client.hset(slot.rows, task_id, " ".join(fields))


def store_raw_errors(app: Conveyor, task_id: str, text: str) -> None:
    """Overwrite a stored task's failure history with ``text`` (the memory store keeps objects: skip)."""
    broker = app.broker
    if isinstance(broker, MemoryBroker):
        pytest.skip("the memory store keeps a task's failures as objects, not encoded")
    if isinstance(broker, SQLiteBroker):
        with sqlite3.connect(broker.config.path) as conn:
            conn.execute("UPDATE tasks SET errors = ? WHERE id = ?", (text, task_id))
        conn.close()
    else:
        assert isinstance(broker, RedisBroker)
        slot = broker.keys.slot(broker._task_prefix(task_id))  # its queue's (layout 5), found by id
        broker.client.delete(slot.errors(task_id))
        broker.client.rpush(slot.errors(task_id), text)


@pytest.fixture
def damaged(app: Conveyor, request: pytest.FixtureRequest) -> str:
    """A pending task in queue ``default`` whose stored options are ``request.param``."""
    handle = app.enqueue("job", args=[1], max_retries=4, task_id="damaged")
    store_raw(app, handle.id, options=request.param)
    return handle.id


def cli(app: Conveyor, *args: str) -> Result:
    result = CliRunner().invoke(cli_group, list(args), obj=CliState(app=app), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def dashboard(app: Conveyor) -> Iterator[TestClient]:
    with TestClient(create_app(app), follow_redirects=False) as client:
        yield client


@pytest.mark.parametrize("damaged", BAD_OPTIONS, indirect=True)
def test_status_and_list_show_undecodable_options_and_an_unknown_retry_budget(app: Conveyor, damaged: str) -> None:
    info = app.get(damaged)
    # the options cannot be read and no worker recorded a limit: the retry budget is unknown, not a default
    assert info.options_error is not None and info.max_retries is None and info.retries_left is None
    assert info.args == [1] and info.payload_error is None
    (listed,) = app.inspect.list("default", "pending")
    assert listed.id == damaged and listed.options_error == info.options_error


@pytest.mark.parametrize("damaged", BAD_OPTIONS[:1], indirect=True)
def test_cli_ls_show_and_stats_show_undecodable_options(app: Conveyor, damaged: str) -> None:
    assert "undecodable options" in cli(app, "ls").output
    (listed,) = json.loads(cli(app, "ls", "--json").output)
    assert listed["id"] == damaged and listed["options_error"]
    assert "options_error" in cli(app, "show", damaged).output
    assert json.loads(cli(app, "show", damaged, "--json").output)["options_error"] == listed["options_error"]
    assert json.loads(cli(app, "stats", "--json").output)["queues"][0]["counts"]["pending"] == 1


@pytest.mark.parametrize("damaged", BAD_OPTIONS[:1], indirect=True)
def test_dashboard_queue_and_task_pages_show_undecodable_options(dashboard: TestClient, damaged: str) -> None:
    queue = dashboard.get("/queues/default?state=pending")
    assert queue.status_code == 200 and damaged in queue.text and "undecodable options" in queue.text
    task = dashboard.get(f"/tasks/{damaged}")
    assert task.status_code == 200 and "undecodable (defaults apply)" in task.text
    assert dashboard.get("/").status_code == 200


def test_undecodable_payload_is_shown_everywhere_too(app: Conveyor, dashboard: TestClient) -> None:
    handle = app.enqueue("job", args=[1], task_id="mangled")
    store_raw(app, handle.id, payload="{not json")
    assert app.get(handle.id).payload_error is not None
    assert "undecodable payload" in cli(app, "ls").output
    assert json.loads(cli(app, "show", handle.id, "--json").output)["payload_error"]
    assert "undecodable payload" in dashboard.get("/queues/default?state=pending").text
    assert "undecodable:" in dashboard.get(f"/tasks/{handle.id}").text


@pytest.mark.parametrize("damaged", BAD_OPTIONS, indirect=True)
def test_worker_archives_a_task_with_undecodable_options_as_poison(app: Conveyor, damaged: str) -> None:
    @app.task
    def job(n: int) -> int:
        return n

    assert app.worker().process_next()
    info = app.get(damaged)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.POISON)
    assert info.last_error is not None and info.last_error.startswith("SerializationError")


def test_undecodable_error_history_is_shown_as_such_not_hidden(app: Conveyor, dashboard: TestClient) -> None:
    @app.task(max_retries=3)
    def job(n: int) -> int:
        raise ConnectionError("down")

    handle = job.enqueue(1)
    app.worker().process_next()
    store_raw_errors(app, handle.id, "[[1, not json")
    (entry,) = app.get(handle.id).errors
    assert entry.error.startswith("undecodable error history")
    assert [info.id for info in app.inspect.list("default", "retry")] == [handle.id]
    assert "undecodable error history" in cli(app, "show", handle.id).output
    assert "undecodable error history" in dashboard.get(f"/tasks/{handle.id}").text
