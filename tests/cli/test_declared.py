"""``conveyor enqueue NAME`` applies the queue a worker declared, and says when no worker declared NAME."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from conveyor import Conveyor, TaskDeclaration
from conveyor.brokers.base import DeclaresTasks
from conveyor.cli import doctor
from conveyor.model import WorkerInfo

Invoke = Callable[..., Result]


def declare(app: Conveyor, *declarations: TaskDeclaration) -> None:
    """What a starting worker does (``worker/registry.py``), without its handlers in this process."""
    assert isinstance(app.broker, DeclaresTasks)
    app.broker.declare_tasks(declarations)


def test_enqueue_by_name_goes_to_the_declared_queue(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("send_email", queue="emails", priority=2))
    result = cli("enqueue", "send_email", "--task-id", "e1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "enqueued e1 (send_email, queue emails, pending)"
    assert result.stderr == ""
    assert app.get("e1").priority == 2


def test_enqueue_queue_option_still_wins_over_the_declaration(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("send_email", queue="emails"))
    result = cli("enqueue", "send_email", "--queue", "urgent", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["queue"] == "urgent"


def test_enqueue_of_an_undeclared_name_warns_in_one_line(cli: Invoke, app: Conveyor) -> None:
    result = cli("enqueue", "send_emial", "--task-id", "t1")
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "warning: no worker has declared task 'send_emial'; it goes to queue 'default' with default options\n"
    )
    assert app.get("t1").queue == "default"


def test_doctor_lists_waiting_tasks_no_worker_declared(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("known"))
    app.enqueue("known")
    app.enqueue("typo_task")
    app.enqueue("typo_task", queue="other")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert checks["undeclared tasks"]["status"] == "WARN"
    assert (
        checks["undeclared tasks"]["detail"]
        == "no worker ever declared: typo_task (1 in default), typo_task (1 in other)"
    )


def test_doctor_says_at_least_for_a_count_it_took_from_a_sample(
    cli: Invoke, app: Conveyor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor, "_SAMPLE", 3)
    app.enqueue_many("typo_task", [((), {})] * 5)
    app.enqueue("typo_task", queue="other")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert checks["undeclared tasks"]["detail"] == (
        "no worker ever declared: typo_task (at least 3 in default), typo_task (1 in other)"
    )


def test_doctor_is_content_when_every_waiting_task_is_declared(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("known"))
    app.enqueue("known")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert checks["task declarations"] == {
        "name": "task declarations",
        "status": "OK",
        "detail": "1 task(s) declared by workers",
    }
    assert "undeclared tasks" not in checks


def test_enqueue_of_an_undeclared_name_names_the_declared_one_it_likely_means(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("send_email", queue="emails"), TaskDeclaration("report"))
    for typed in ("tasks.send_email", "send_emial"):  # Celery's module.function; a typo
        result = cli("enqueue", typed)
        assert result.exit_code == 0, result.output
        assert result.stderr == (
            f"warning: no worker has declared task {typed!r} (did you mean 'send_email'?); "
            "it goes to queue 'default' with default options\n"
        )


def test_doctor_names_the_declared_task_an_undeclared_one_likely_means(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("send_email"))
    app.enqueue("tasks.send_email")
    app.enqueue("other_thing")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert checks["undeclared tasks"]["detail"] == (
        "no worker ever declared: other_thing (1 in default), "
        "tasks.send_email (1 in default; did you mean 'send_email'?)"
    )


def test_doctor_warns_of_waiting_tasks_in_queues_no_live_worker_serves(cli: Invoke, app: Conveyor) -> None:
    declare(app, TaskDeclaration("send_email", queue="emails"), TaskDeclaration("report", queue="reports"))
    app.enqueue("send_email")
    app.enqueue("send_email", delay=60)
    app.enqueue("report")
    app.enqueue("report", queue="paused")
    app.inspect.pause("paused")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert "unserved queues" not in checks  # no live worker at all: the workers check says so
    assert checks["workers"]["status"] == "WARN"

    app.broker.register_worker(WorkerInfo("w1", "h", 1, ("default", "reports"), 4, app.now()), app.now(), 60.0)
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert checks["unserved queues"] == {
        "name": "unserved queues",
        "status": "WARN",
        "detail": "no live worker serves: emails (2 waiting)",  # a paused queue is left alone
    }
    app.broker.register_worker(WorkerInfo("w2", "h", 2, ("emails",), 4, app.now()), app.now(), 60.0)
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)}
    assert "unserved queues" not in checks
