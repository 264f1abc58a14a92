"""``run-now --all`` and ``delete --all``: every task a filter keeps, asked first, on every broker."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from conveyor import Conveyor, TaskNotFound, TaskState

Invoke = Callable[..., Result]


@pytest.fixture
def failed(app: Conveyor) -> dict[str, list[str]]:
    """Archived and retrying tasks over two queues: ids by kind (``mail`` failed with ``boom <n>``,
    ``mail_retry`` waiting for a retry, ``report`` failed, ``manual`` archived by hand, ``done``)."""

    @app.task(queue="mail", max_retries=0)
    def send(n: int) -> None:
        raise ValueError(f"boom {n}")

    @app.task(queue="mail", max_retries=3)
    def flaky(n: int) -> None:
        raise ConnectionError(f"reset {n}")

    @app.task(queue="reports", max_retries=0)
    def report(n: int) -> None:
        raise KeyError(n)

    @app.task(queue="reports")
    def fine() -> None:
        return None

    ids = {
        "mail": [send.enqueue(n).id for n in (1, 2, 11)],
        "mail_retry": [flaky.enqueue(5).id],
        "report": [report.enqueue(3).id],
        "manual": [fine.enqueue().id],
    }
    app.inspect.archive(ids["manual"][0])
    ids["done"] = [fine.enqueue().id]
    app.worker(queues=["mail", "reports"]).run_until_idle()
    assert app.get(ids["mail_retry"][0]).state is TaskState.RETRY
    assert {app.get(i).state for key in ("mail", "report", "manual") for i in ids[key]} == {TaskState.ARCHIVED}
    return ids


def _states(app: Conveyor, ids: list[str]) -> list[TaskState]:
    return [app.get(task_id).state for task_id in ids]


def test_run_now_all_requeues_the_failed_tasks_the_filters_keep(
    cli: Invoke, app: Conveyor, failed: dict[str, list[str]]
) -> None:
    result = cli("run-now", "--all", "--queue", "mail", "--error", "BOOM 1", "--yes")  # case-insensitive
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "queued 2 of 2 matching task(s)"  # boom 1 and boom 11
    assert result.stderr == ""  # not a terminal: no progress bar, nor the empty line it would leave
    assert _states(app, failed["mail"]) == [TaskState.PENDING, TaskState.ARCHIVED, TaskState.PENDING]
    assert _states(app, failed["report"] + failed["mail_retry"]) == [TaskState.ARCHIVED, TaskState.RETRY]

    result = cli("run-now", "--all", "--state", "retry", "--json", "--yes")
    assert json.loads(result.stdout) == {"matched": 1, "queued": 1, "not_changed": 0, "why": None}
    assert _states(app, failed["mail_retry"]) == [TaskState.PENDING]

    # by default every retry and archived task of every queue: here the ones left
    result = cli("run-now", "--all", "--yes")
    assert result.stdout.strip() == "queued 3 of 3 matching task(s)", result.output
    assert set(_states(app, failed["mail"] + failed["report"] + failed["manual"])) == {TaskState.PENDING}
    assert _states(app, failed["done"]) == [TaskState.COMPLETED]


def test_run_now_all_asks_first_naming_how_many_and_changes_nothing_when_refused(
    cli: Invoke, app: Conveyor, failed: dict[str, list[str]]
) -> None:
    result = cli("run-now", "--all", "--reason", "manual", input="n\n")
    assert result.exit_code == 1
    assert "Run now 1 task(s) in retry or archived, of every queue, archived manual? [y/N]" in result.stderr
    assert "Aborted" in result.stderr
    assert _states(app, failed["manual"]) == [TaskState.ARCHIVED]
    result = cli("run-now", "--all", "--reason", "manual", input="y\n")
    assert result.exit_code == 0, result.output
    assert _states(app, failed["manual"] + failed["report"]) == [TaskState.PENDING, TaskState.ARCHIVED]


def test_delete_all_deletes_the_tasks_the_filters_keep(
    cli: Invoke, app: Conveyor, failed: dict[str, list[str]]
) -> None:
    result = cli("delete", "--all", "--state", "archived", "--name", "repo", "--json", "--yes")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"matched": 1, "deleted": 1, "not_changed": 0, "why": None}
    with pytest.raises(TaskNotFound):
        app.get(failed["report"][0])
    result = cli("delete", "--all", "--queue", "reports", "--state", "completed", "--yes")
    assert result.stdout.strip() == "deleted 1 of 1 matching task(s)", result.output
    with pytest.raises(TaskNotFound):
        app.get(failed["done"][0])
    assert _states(app, failed["manual"] + failed["mail"][:1]) == [TaskState.ARCHIVED, TaskState.ARCHIVED]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((), "Error: give task IDs, or --all"),
        (("some-id", "--all"), "Error: give task IDs, or --all (with options to narrow it), not both"),
        (("some-id", "--queue", "mail"), "Error: --queue narrows --all: give --all, or task IDs alone"),
        (("--state", "archived", "--error", "x"), "Error: --state, --error narrow --all"),
        (("--all", "--state", "pending"), "Error: Invalid value for '-s' / '--state': 'pending' is not one of"),
    ],
)
def test_run_now_without_a_clear_selection_is_a_usage_error(
    cli: Invoke, app: Conveyor, failed: dict[str, list[str]], args: tuple[str, ...], error: str
) -> None:
    result = cli("run-now", *args)
    assert result.exit_code == 2, result.output
    assert error in result.stderr, result.stderr
    assert _states(app, failed["mail"]) == [TaskState.ARCHIVED] * 3


def test_an_unknown_queue_is_named_not_taken_for_no_match(cli: Invoke, failed: dict[str, list[str]]) -> None:
    result = cli("delete", "--all", "--queue", "mial", "--yes")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: queue not found: 'mial' (known: mail, reports)", result.stderr
