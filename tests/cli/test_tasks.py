"""``enqueue``, ``ls``, ``show`` and the task actions, through the CLI, on every broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from conveyor import Conveyor, TaskNotFound, TaskState

Invoke = Callable[..., Result]


def test_enqueue_stores_args_kwargs_and_options(cli: Invoke, app: Conveyor) -> None:
    result = cli(
        "enqueue", "send", "--args", '["a@x.com", 2]', "--kwargs", '{"subject": "hi"}',
        "--priority", "5", "--queue", "mail", "--task-id", "welcome-1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "welcome-1"
    info = app.get("welcome-1")
    assert (info.name, info.queue, info.priority) == ("send", "mail", 5)
    assert (info.args, info.kwargs, info.state) == (["a@x.com", 2], {"subject": "hi"}, TaskState.PENDING)


def test_enqueue_with_delay_schedules_the_task(cli: Invoke, app: Conveyor) -> None:
    result = cli("enqueue", "later", "--delay", "60", "--task-id", "t1")
    assert result.exit_code == 0, result.output
    info = app.get("t1")
    assert info.state == TaskState.SCHEDULED
    assert info.next_run_at == app.now() + 60


def test_enqueue_rejects_bad_json_in_one_line(cli: Invoke) -> None:
    result = cli("enqueue", "x", "--args", "[1,")
    assert result.exit_code == 2
    assert "--args" in result.stderr and "not valid JSON" in result.stderr
    assert "Traceback" not in result.output


def test_enqueue_rejects_args_that_are_not_an_array(cli: Invoke) -> None:
    result = cli("enqueue", "x", "--args", '{"a": 1}')
    assert result.exit_code == 2
    assert "must be a JSON array" in result.stderr


def test_enqueue_duplicate_id_is_one_line_error(cli: Invoke) -> None:
    assert cli("enqueue", "x", "--task-id", "same").exit_code == 0
    result = cli("enqueue", "x", "--task-id", "same")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: duplicate task; existing task id: 'same'"


def test_enqueue_invalid_queue_name_is_a_usage_error_naming_the_option(cli: Invoke) -> None:
    result = cli("enqueue", "x", "--queue", "bad queue!")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [
        "Error: Invalid value for '--queue': queue name must match [A-Za-z0-9._-]{1,64}, got 'bad queue!'"
    ]
    assert "Traceback" not in result.stderr


def test_enqueue_from_file_enqueues_every_line(cli: Invoke, app: Conveyor, tmp_path: Path) -> None:
    lines = [json.dumps({"args": [i], "kwargs": {"n": i}}) for i in range(1200)]
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = cli("enqueue", "bulk", "--file", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["enqueued"] == 1200
    assert app.stats()["default"]["pending"] == 1200


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ('{"args": [NaN]}', "line 551: not valid JSON (NaN is not JSON)"),
        ('{"arg": [1]}', "line 551: unknown key(s) 'arg'"),
        ('{"args": [1], "queue": "x"}', "line 551: unknown key(s) 'queue'"),
    ],
)
def test_enqueue_from_file_checks_every_line_before_storing_any(
    cli: Invoke, app: Conveyor, tmp_path: Path, bad: str, says: str
) -> None:
    """Chunks of 500 were stored before line 551 was found bad (NaN passed the first check, unknown
    keys were dropped silently): fixing the file and running it again stored them twice."""
    lines = [json.dumps({"args": [i]}) for i in range(550)] + [bad]
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = cli("enqueue", "bulk", "--file", str(path))
    assert result.exit_code == 1 and says in result.stderr, result.output
    assert app.stats() == {}


def test_enqueue_from_file_past_max_size_stores_nothing_where_a_call_is_atomic(
    cli: Invoke, app: Conveyor, tmp_path: Path, broker_url: str
) -> None:
    """It was 500 on every backend (the file went in chunks of 500 calls); Redis stores 500 tasks a
    call, so a QueueFull there keeps the calls before it, as the README says."""
    app.configure_queue("default", max_size=700)
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(json.dumps({"args": [i]}) for i in range(1000)) + "\n")
    result = cli("enqueue", "bulk", "--file", str(path))
    assert result.exit_code == 1 and "is full (max_size=700)" in result.stderr, result.output
    kept = 500 if broker_url.startswith("redis") else 0
    assert app.stats()["default"]["total"] == kept
    assert ("500 task(s) of the call stay stored and will run" in " ".join(result.stderr.split())) is (kept > 0)


@pytest.mark.parametrize("bad_line", [1, 2, 1001])
def test_enqueue_file_names_the_line_that_is_not_utf8(
    cli: Invoke, app: Conveyor, tmp_path: Path, bad_line: int
) -> None:
    lines = [json.dumps({"args": [i]}).encode() for i in range(1, 1101)]
    lines[bad_line - 1] = b'{"args": ["caf\xe9"]}'  # Latin-1, not UTF-8
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = cli("enqueue", "bulk", "--file", str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: line {bad_line}: not UTF-8 text"), result.stderr
    assert all(counts["total"] == 0 for counts in app.stats().values())


def test_enqueue_file_reads_stdin_too(cli: Invoke, app: Conveyor) -> None:
    result = cli("enqueue", "bulk", "--file", "-", input='{"args": [1]}\n{"args": ["\u00e9"]}\n')
    assert result.exit_code == 0, result.output
    assert sorted(str(info.args) for info in app.inspect.list("default", "pending")) == sorted(["[1]", "['é']"])


def test_ls_lists_a_page_of_one_state(cli: Invoke, app: Conveyor) -> None:
    for i in range(5):
        app.enqueue("job", args=[i], task_id=f"job-{i}")
    result = cli("ls", "--queue", "default", "--state", "pending", "--limit", "2", "--offset", "1", "--json")
    assert result.exit_code == 0, result.output
    assert [t["id"] for t in json.loads(result.stdout)] == ["job-1", "job-2"]
    table = cli("ls")
    assert table.exit_code == 0
    assert all(f"job-{i}" in table.stdout for i in range(5))


#: Text in a task that Rich would read as its markup or emoji codes: printed as written.
MARKUP = "[bold]hidden[/bold] part [/] :smile:"


def test_show_and_ls_print_a_tasks_text_as_it_is(cli: Invoke, app: Conveyor) -> None:
    @app.task(max_retries=0)
    def echo(text: str) -> str:
        raise ValueError(f"expected list[int], got {text}")

    handle = echo.enqueue(MARKUP)
    app.worker().run_until_idle()
    shown = cli("show", handle.id)
    assert shown.exit_code == 0, shown.output
    assert json.dumps([MARKUP]) in shown.stdout
    assert f"ValueError: expected list[int], got {MARKUP}" in " ".join(shown.stdout.split())
    listed = cli("ls", "--state", "archived")
    assert listed.exit_code == 0, listed.output
    assert "expected list[int]" in listed.stdout  # the error, cut to its first 50 characters


def test_ls_rejects_an_unknown_state(cli: Invoke) -> None:
    result = cli("ls", "--state", "done")
    assert result.exit_code == 2


def test_show_prints_every_field_errors_and_timeline(cli: Invoke, failing_task: Callable[[], str]) -> None:
    task_id = failing_task()
    data = json.loads(cli("show", task_id, "--json").stdout)
    assert data["state"] == "archived" and data["archive_reason"] == "failed"
    assert data["finished_at"] is not None and data["completed_at"] == data["finished_at"]  # old key, one release
    assert data["errors"][0]["error"] == "ValueError: boom 7"
    assert [entry["event"] for entry in data["timeline"]][:3] == ["enqueued", "started", "failed"]
    text = cli("show", task_id).stdout
    for heading in ("retries_left", "Error history", "Timeline", "ValueError: boom 7"):
        assert heading in text
    assert "completed_at" not in text  # the JSON's old key only; the table shows finished_at, formatted


def test_show_prints_the_latest_failures_traceback(cli: Invoke, failing_task: Callable[[], str]) -> None:
    task_id = failing_task()
    data = json.loads(cli("show", task_id, "--json").stdout)
    assert "in explode" in data["traceback"] and data["traceback"].endswith("ValueError: boom 7\n")
    text = cli("show", task_id).stdout
    assert "Traceback of the latest failure" in text
    assert 'raise ValueError(f"boom {x}")' in text  # markup-like text printed as it is
    done = cli("enqueue", "later", "--json")
    shown = json.loads(cli("show", json.loads(done.stdout)["id"], "--json").stdout)
    assert shown["traceback"] is None
    assert "Traceback of the latest failure" not in cli("show", json.loads(done.stdout)["id"]).stdout


def test_show_unknown_task_is_one_line_error(cli: Invoke) -> None:
    result = cli("show", "nope")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: task not found: 'nope'"


def test_run_now_requeues_an_archived_task(cli: Invoke, app: Conveyor, failing_task: Callable[[], str]) -> None:
    task_id = failing_task()
    result = cli("run-now", task_id)
    assert result.exit_code == 0, result.output
    assert app.get(task_id).state == TaskState.PENDING


def test_archive_and_cancel_and_delete_take_several_ids(cli: Invoke, app: Conveyor) -> None:
    ids = [app.enqueue("job", args=[i]).id for i in range(6)]
    assert cli("archive", ids[0], ids[1]).exit_code == 0
    assert cli("cancel", ids[2], ids[3], "--json").exit_code == 0
    assert cli("delete", ids[4], ids[5]).exit_code == 0
    assert [app.get(i).archive_reason for i in ids[:4]] == ["manual", "manual", "cancelled", "cancelled"]
    for gone in ids[4:]:
        try:
            app.get(gone)
        except TaskNotFound:
            continue
        raise AssertionError(f"{gone} was not deleted")


def test_action_reports_each_failure_and_exits_1(cli: Invoke, app: Conveyor) -> None:
    good = app.enqueue("job").id
    result = cli("archive", good, "missing", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == [
        {"id": good, "ok": True},
        {"id": "missing", "ok": False, "error": "task not found: 'missing'"},
    ]
    assert app.get(good).state == TaskState.ARCHIVED


def test_action_on_wrong_state_says_why(cli: Invoke, app: Conveyor) -> None:
    task_id = app.enqueue("job").id
    result = cli("run-now", task_id)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot run pending task {task_id!r} now")
    assert len(result.stderr.splitlines()) == 1


def test_show_says_the_retry_limit_is_unknown_until_a_worker_records_it(cli: Invoke) -> None:
    assert cli("enqueue", "only_in_workers", "--task-id", "t-unknown").exit_code == 0
    data = json.loads(cli("show", "t-unknown", "--json").stdout)
    assert (data["max_retries"], data["retries_left"]) == (None, None)
    assert "unknown (no worker has reported the task's retry limit yet)" in cli("show", "t-unknown").stdout
