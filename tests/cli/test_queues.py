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
    assert result.stderr == ""  # not a terminal: no progress bar, nor the empty line it would leave
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


def test_purge_and_ls_of_an_unknown_queue_name_the_known_ones(cli: Invoke, app: Conveyor) -> None:
    """They said "deleted 0" and "no pending tasks" (exit 0) for a misspelt queue, where pause, resume
    and run-now --all call it an error; ``ls`` without --queue still lists ``default`` quietly."""
    app.enqueue("job", queue="emails")
    for args in (["purge", "emials", "-s", "pending", "--yes"], ["ls", "-q", "emials"]):
        result = cli(*args)
        assert (result.exit_code, result.stderr) == (1, "Error: queue not found: 'emials' (known: emails)\n"), args
    assert cli("ls").output == "no pending tasks in queue 'default'\n"


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


def _settings(app: Conveyor, queue: str) -> dict[str, object]:
    info = next(q for q in app.inspect.queues() if q.name == queue)
    s = info.settings
    return {"max_size": s.max_size, "concurrency": s.concurrency, "aging": s.aging, "partitions": s.partitions,
            "paused": s.paused}  # fmt: skip


def test_queues_configure_shows_a_queues_settings_and_changes_only_those_given(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a", queue="mail")
    shown = cli("queues", "configure", "mail")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip() == "queue mail: max_size none, concurrency none, aging none, partitions 1, paused False"

    app.configure_queue("mail", max_size=100, concurrency=3, aging=60.0)
    app.inspect.pause("mail")
    done = cli("queues", "configure", "mail", "--partitions", "4", "--concurrency", "none")
    assert done.exit_code == 0, done.output
    assert (
        done.stdout.strip() == "configured mail: max_size 100, concurrency none, aging 60.0, partitions 4, paused True"
    )
    assert _settings(app, "mail") == {
        "max_size": 100,
        "concurrency": None,
        "aging": 60.0,
        "partitions": 4,
        "paused": True,
    }

    data = json.loads(cli("queues", "configure", "mail", "--aging", "none", "--max-size", "5", "--json").stdout)
    assert data == {"name": "mail", "max_size": 5, "concurrency": None, "aging": None, "paused": True, "partitions": 4}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--max-size", "many"], 2, "'many' is not an integer or 'none'"),
        (["--aging", "soon"], 2, "'soon' is not a number or 'none'"),
        (["--partitions", "0"], 2, "--partitions"),
        (["--concurrency", "0"], 2, "concurrency"),  # out of range: a usage error too
        (["--max-size", "-1"], 2, "max_size"),
        (["--aging", "0"], 2, "aging must be > 0"),
    ],
)
def test_queues_configure_refuses_a_bad_value_and_keeps_the_settings(
    cli: Invoke, app: Conveyor, args: list[str], code: int, message: str
) -> None:
    app.configure_queue("mail", max_size=100, concurrency=3, partitions=2)
    result = cli("queues", "configure", "mail", *args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert _settings(app, "mail") == {
        "max_size": 100,
        "concurrency": 3,
        "aging": None,
        "partitions": 2,
        "paused": False,
    }


def test_queues_configure_partitions_of_a_queue_with_tasks_runs_every_task(cli: Invoke, app: Conveyor) -> None:
    @app.task(queue="mail")
    def send(i: int) -> int:
        return i

    handles = [send.enqueue(i) for i in range(30)]
    assert cli("queues", "configure", "mail", "--partitions", "6").exit_code == 0
    handles += [send.enqueue(i) for i in range(30, 60)]
    assert cli("queues", "configure", "mail", "--partitions", "2").exit_code == 0
    handles += [send.enqueue(i) for i in range(60, 90)]
    worker = app.worker(queues=["mail"])
    assert worker.run_until_idle() == 90
    assert sorted(handle.result(timeout=0) for handle in handles) == list(range(90))


def test_queues_configure_of_an_unknown_queue_needs_create(cli: Invoke, app: Conveyor) -> None:
    for args in ([], ["--max-size", "5"]):  # a typo must not make a new queue
        result = cli("queues", "configure", "mial", *args)
        assert result.exit_code == 1, result.output
        assert "queue not found: 'mial'" in result.output
    assert all(q.name != "mial" for q in app.inspect.queues())
    alone = cli("queues", "configure", "empty", "--create")  # made with every setting at its default
    assert (alone.exit_code, alone.output) == (0, "configured empty: max_size none, concurrency none, aging none,"
                                               " partitions 1, paused False\n")  # fmt: skip
    assert _settings(app, "empty")["max_size"] is None
    made = cli("queues", "configure", "ahead", "--max-size", "5", "--create")
    assert made.exit_code == 0, made.output
    assert _settings(app, "ahead") == {
        "max_size": 5,
        "concurrency": None,
        "aging": None,
        "partitions": 1,
        "paused": False,
    }


@pytest.mark.parametrize(
    "command",
    [
        ["ls", "-q", "bad q"],
        ["pause", "bad q", "--create"],
        ["resume", "bad q"],
        ["purge", "bad q", "-s", "pending", "-y"],
        ["queues", "configure", "bad q", "--create"],
        ["queues", "delete", "bad q"],
        ["run-now", "--all", "-q", "bad q", "-y"],
        ["delete", "--all", "-q", "bad q", "-y"],
        ["enqueue", "x", "--queue", "bad q"],
    ],
)
def test_a_name_no_queue_can_have_is_a_usage_error_in_every_command(
    cli: Invoke, app: Conveyor, command: list[str]
) -> None:
    result = cli(*command)
    assert result.exit_code == 2, result.output
    assert "queue name must match [A-Za-z0-9._-]{1,64}, got 'bad q'" in result.stderr
    assert app.stats() == {}


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["enqueue", "x", "--delay", "-1"], "delay must be finite and >= 0"),
        (["enqueue", "x", "--delay", "nan"], "delay must be finite and >= 0"),
        (["enqueue", "x", "--priority", "99999999999"], "priority must be between -1000000 and 1000000"),
        (["queues", "configure", "q", "--create", "--max-size", "-1"], "max_size must be >= 0"),
        (["queues", "configure", "q", "--create", "--concurrency", "0"], "concurrency must be >= 1"),
        (["queues", "configure", "q", "--create", "--aging", "0"], "aging must be > 0"),
        (
            ["queues", "configure", "q", "--create", "--max-size", str(10**16)],
            "max_size must be <= 1,000,000,000,000,000",
        ),
    ],
)
def test_a_number_out_of_range_is_a_usage_error_as_a_malformed_one_is(
    cli: Invoke, app: Conveyor, command: list[str], says: str
) -> None:
    result = cli(*command)
    assert result.exit_code == 2, result.output
    assert says in result.stderr
    assert app.stats() == {}
