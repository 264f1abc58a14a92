"""Admin edges: unknown queues are not made by accident and can be deleted; paging says where it is."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from conveyor import Conveyor, InvalidTransition, QueueNotFound
from conveyor.model import QueueSettings

Invoke = Callable[..., Result]


def test_pause_of_an_unknown_queue_creates_nothing(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("job")
    result = cli("pause", "nosuchqueue")
    assert result.exit_code == 1
    assert result.stderr == "Error: queue not found: 'nosuchqueue' (known: default)\n"
    assert [q.name for q in app.inspect.queues()] == ["default"]


def test_pause_and_resume_a_known_queue(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("job", queue="mail")
    assert cli("pause", "mail").stdout == "paused mail\n"
    assert app.inspect.queue("mail").settings.paused
    assert cli("resume", "mail").stdout == "resumed mail\n"


def test_queues_delete_forgets_an_empty_queue_and_its_settings(cli: Invoke, app: Conveyor) -> None:
    app.configure_queue("typo", max_size=5)
    app.enqueue("job")
    result = cli("queues", "delete", "typo")
    assert (result.exit_code, result.stdout) == (0, "deleted queue typo\n")
    assert [q.name for q in app.inspect.queues()] == ["default"]
    app.enqueue("job", queue="typo")  # a new queue of that name starts with no settings
    assert app.inspect.queue("typo").settings.max_size is None


def test_queues_delete_forgets_every_setting_of_a_partitioned_queue(cli: Invoke, app: Conveyor) -> None:
    """Its limits held in the partitions and in the queue's entry alike: none survives the delete."""
    app.configure_queue("spread", max_size=5, concurrency=2, aging=5.0, partitions=3)
    app.inspect.pause("spread")
    assert cli("queues", "delete", "spread").exit_code == 0
    handles = [app.enqueue("job", queue="spread") for _ in range(8)]  # past the old max_size
    assert app.inspect.queue("spread").settings == QueueSettings("spread")
    claimed = app.broker.claim(["spread"], app.now(), 30.0, limit=8)  # past the old concurrency
    assert sorted(record.id for record in claimed) == sorted(handle.id for handle in handles)


def test_queues_delete_refuses_a_queue_with_tasks(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("job", queue="busy")
    result = cli("queues", "delete", "busy")
    assert result.exit_code == 1
    assert result.stderr == "Error: queue 'busy' still holds 1 task(s); purge them first\n"
    assert cli("purge", "busy", "-s", "pending", "-y").exit_code == 0
    assert cli("queues", "delete", "busy").exit_code == 0


def test_queues_delete_of_an_unknown_queue(cli: Invoke, app: Conveyor) -> None:
    result = cli("queues", "delete", "nope")
    assert result.exit_code == 1
    assert result.stderr == "Error: queue not found: 'nope'\n"


def test_inspector_delete_queue_errors(app: Conveyor) -> None:
    with pytest.raises(QueueNotFound):
        app.inspect.delete_queue("nope")
    app.enqueue("job")
    with pytest.raises(InvalidTransition):
        app.inspect.delete_queue("default")


def test_ls_shows_the_total_and_the_next_page(cli: Invoke, app: Conveyor) -> None:
    for _ in range(3):
        app.enqueue("job")
    out = cli("ls", "-n", "2").stdout
    assert "default · pending · 1-2 of 3" in out
    assert out.endswith("more: --offset 2\n")
    last = cli("ls", "-n", "2", "--offset", "2").stdout
    assert "3-3 of 3" in last and "more:" not in last


def test_ls_past_the_end_says_how_many_there_are(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("job")
    assert cli("ls", "--offset", "10").stdout == "no pending tasks in queue 'default' at offset 10 (there are 1)\n"
    assert cli("ls", "-s", "retry").stdout == "no retry tasks in queue 'default'\n"


def test_ls_json_is_still_the_list_of_tasks(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("job", task_id="t1")
    assert [t["id"] for t in json.loads(cli("ls", "--json").stdout)] == ["t1"]


def test_dashboard_refuses_a_short_token(cli: Invoke) -> None:
    result = cli("dashboard", "--token", "short")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: Invalid value for --token: must be at least 16 characters; make one with:"
        " python -c 'import secrets; print(secrets.token_urlsafe())'"
    )


def test_stats_watch_refuses_a_zero_interval(cli: Invoke) -> None:
    result = cli("stats", "--watch", "--interval", "0")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == ("Error: Invalid value for '--interval': 0.0 is not in the range x>=0.1.")


def test_pause_create_pauses_a_queue_ahead_of_its_first_task(cli: Invoke, app: Conveyor) -> None:
    assert cli("pause", "later", "--create").stdout == "paused later\n"
    assert app.inspect.queue("later").settings.paused


@pytest.mark.parametrize(
    ("spec", "says"),
    [("", "no queue named in ''"), ("emails=x", "the weight of queue 'emails' must be a whole number, got 'x'")],
)
def test_a_bad_queues_option_is_a_usage_error_before_anything_starts(cli: Invoke, spec: str, says: str) -> None:
    """An empty -Q (an unset variable) served `default` quietly; a bad weight was a bare int() error."""
    result = cli("worker", "no_such_module:app", "-Q", spec)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--queues' / '-Q': {says}" in result.stderr


@pytest.mark.parametrize(
    ("typed", "ours"), [("retry", "run-now"), ("revoke", "cancel"), ("inspect", "show"), ("list", "ls")]
)
def test_a_peers_command_name_points_at_ours(cli: Invoke, typed: str, ours: str) -> None:
    result = cli(typed, "x")
    assert result.exit_code == 2
    assert f"No such command {typed!r}. Did you mean {ours!r}?" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["job", "--queue", "bad q"], "Invalid value for '--queue': queue name must match"),
        (["job", "--task-id", "has space"], "Invalid value for '--task-id': task id must match"),
        (["bad name"], "Invalid value for 'NAME': task name must match"),
    ],
)
def test_a_malformed_enqueue_value_is_a_usage_error(cli: Invoke, app: Conveyor, args: list[str], says: str) -> None:
    """Exit 2 (a usage mistake, as docs/cli.md says), not 1; nothing enqueued."""
    result = cli("enqueue", *args)
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert app.stats() == {}
