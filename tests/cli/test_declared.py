"""``conveyor enqueue NAME`` applies the queue a worker declared, and says when no worker declared NAME."""

from __future__ import annotations

import json
from collections.abc import Callable

from click.testing import Result

from conveyor import Conveyor, TaskDeclaration
from conveyor.brokers.base import DeclaresTasks

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
