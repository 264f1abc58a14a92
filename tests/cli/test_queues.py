"""``stats``, ``pause`` / ``resume`` and ``purge`` through the CLI, on every broker."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from conveyor import Conveyor
from conveyor.cli import cli as cli_group

Invoke = Callable[..., Result]


def test_stats_shows_counts_per_queue_and_state(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a", queue="mail")
    app.enqueue("b", queue="mail", delay=30)
    app.enqueue("c")
    data = json.loads(cli("stats", "--json").stdout)
    counts = {q["name"]: q["counts"] for q in data["queues"]}
    assert counts["mail"]["pending"] == 1 and counts["mail"]["scheduled"] == 1 and counts["mail"]["total"] == 2
    assert counts["default"]["pending"] == 1
    text = cli("stats").stdout
    assert "mail" in text and "default" in text and "scheduled" in text


def test_stats_shows_a_queues_partitions_where_some_queue_has_several(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a")
    assert "partitions" not in cli("stats").stdout
    app.configure_queue("mail", partitions=3)
    data = json.loads(cli("stats", "--json").stdout)
    assert {q["name"]: q["settings"]["partitions"] for q in data["queues"]} == {"default": 1, "mail": 3}
    assert "partitions" in cli("stats").stdout


def test_global_json_flag_works_before_the_command(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a")
    assert json.loads(cli("--json", "stats").stdout)["queues"][0]["name"] == "default"


def test_stats_watch_redraws_until_stopped(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a", queue="live")
    result = cli("stats", "--watch", "--interval", "0.1", "--iterations", "2")
    assert result.exit_code == 0, result.output
    assert "live" in result.stdout


def test_stats_watch_refuses_json(cli: Invoke) -> None:
    assert cli("stats", "--watch", "--json").exit_code == 2


def test_pause_and_resume_set_the_paused_flag(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a", queue="q1")
    assert cli("pause", "q1").exit_code == 0
    assert [q.settings.paused for q in app.inspect.queues() if q.name == "q1"] == [True]
    assert "yes" in cli("stats").stdout
    assert cli("resume", "q1").exit_code == 0
    assert [q.settings.paused for q in app.inspect.queues() if q.name == "q1"] == [False]


def test_purge_with_yes_deletes_all_in_chunks(cli: Invoke, app: Conveyor) -> None:
    for i in range(5):
        app.enqueue("a", delay=100, task_id=f"s{i}")
    app.enqueue("a", task_id="keep")
    result = cli("purge", "default", "--state", "scheduled", "--yes", "--chunk", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 5
    assert app.stats()["default"]["scheduled"] == 0
    assert app.stats()["default"]["pending"] == 1


def test_purge_asks_first_and_aborts_on_no(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a")
    result = cli("purge", "default", "--state", "pending", input="n\n")
    assert result.exit_code == 1
    assert "Delete 1 pending task(s) of queue 'default'?" in result.stderr
    assert app.stats()["default"]["pending"] == 1
    assert cli("purge", "default", "--state", "pending", input="y\n").exit_code == 0
    assert app.stats()["default"]["pending"] == 0


def test_purge_refuses_active_tasks(cli: Invoke) -> None:
    assert cli("purge", "default", "--state", "active", "--yes").exit_code == 2


def test_demo_delegates_to_conveyor_demo_main(monkeypatch: pytest.MonkeyPatch) -> None:
    import conveyor.demo

    calls: list[str] = []

    def fake_main() -> int:
        calls.append("ran")
        return 3

    monkeypatch.setattr(conveyor.demo, "main", fake_main)
    result = CliRunner().invoke(cli_group, ["demo"])
    assert calls == ["ran"]
    assert result.exit_code == 3
