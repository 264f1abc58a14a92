"""Broker URLs given to the CLI: read-only commands never create a database; malformed URLs are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from conveyor.cli import cli as cli_group
from conveyor.cli.output import redact


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    return tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli_group, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["ls"],
        ["show", "x"],
        ["pause", "q"],
        ["resume", "q"],
        ["cancel", "x"],
        ["purge", "q", "-s", "pending", "-y"],
    ],
)
def test_read_only_commands_do_not_create_a_database(empty_dir: Path, command: list[str]) -> None:
    result = run(*command)
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no Conveyor database at {empty_dir / 'conveyor.db'}; check --url or CONVEYOR_URL"
        " (`conveyor enqueue` or a worker creates it)\n"
    )
    assert list(empty_dir.iterdir()) == []


def test_doctor_fails_on_a_missing_database_without_creating_it(empty_dir: Path) -> None:
    result = run("doctor", "--json")
    assert result.exit_code == 1
    assert '"status": "FAIL"' in result.stdout and "no Conveyor database at" in result.stdout
    assert list(empty_dir.iterdir()) == []


def test_enqueue_creates_the_database(empty_dir: Path) -> None:
    assert run("enqueue", "x").exit_code == 0
    assert (empty_dir / "conveyor.db").exists()
    assert run("stats").exit_code == 0


@pytest.mark.parametrize("command", [["pause", "q", "--create"], ["queues", "configure", "q", "--create"]])
def test_a_queue_set_up_ahead_of_its_first_task_creates_the_database(empty_dir: Path, command: list[str]) -> None:
    result = run(*command)
    assert result.exit_code == 0, result.output
    assert (empty_dir / "conveyor.db").exists()
    assert run("queues", "configure", "q").exit_code == 0  # known now


@pytest.mark.parametrize("url", ["sqlite:/x.db", "sqlite:x.db"])
def test_a_sqlite_url_with_too_few_slashes_is_an_error(empty_dir: Path, url: str) -> None:
    result = run("--url", url, "enqueue", "x")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: malformed sqlite URL {url!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db\n"
    )
    assert list(empty_dir.iterdir()) == []


def test_an_empty_url_is_a_usage_error(empty_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = (
        "Error: Invalid value for --url / CONVEYOR_URL: empty broker URL;"
        " expected memory://, sqlite:///path.db or redis://host:6379/0"
    )
    result = run("--url", "", "stats")
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (2, expected)
    monkeypatch.setenv("CONVEYOR_URL", "")
    result = run("stats")
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (2, expected)
    assert list(empty_dir.iterdir()) == []


def test_an_unknown_scheme_names_the_known_ones(empty_dir: Path) -> None:
    result = run("--url", "postgres://x/y", "stats")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: unsupported broker URL 'postgres://x/y': scheme must be one of memory://, redis://, redis+cluster://,"
        " redis+sentinel://, rediss://, rediss+cluster://, rediss+sentinel://, sqlite://\n"
    )


def test_an_unknown_redis_option_lists_the_valid_ones(empty_dir: Path) -> None:
    result = run("--url", "redis://:pw@127.0.0.1:1/0?bogus=1", "stats")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "Error: unknown redis URL option 'bogus' in redis://127.0.0.1:1/0;"
        " valid options: client_name, clock_refresh, db,"
    )
    assert "pw" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_tls_option_on_a_plain_redis_url_says_to_use_rediss(empty_dir: Path) -> None:
    result = run("--url", "redis://127.0.0.1:1/0?ssl_ca_certs=ca.pem", "stats")
    assert result.exit_code == 1
    assert result.stderr == "Error: redis URL option 'ssl_ca_certs' needs TLS: use rediss:// instead of redis://\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        (
            "redis+sentinel://u:pw@a:26379,b:26379/svc?namespace=n&sentinel_password=s3",
            "redis+sentinel://u:***@a:26379,b:26379/svc?namespace=n&sentinel_password=***",
        ),
        ("redis://h/0?password=pw", "redis://h/0?password=***"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("reddis://:pw@h:6390/0", "reddis://:***@h:6390/0"),  # a scheme nobody serves
        ("http://user:pw@h/0", "http://user:***@h/0"),
        ("redis:/:pw@h/0", "redis:/:***@h/0"),  # one slash: no authority found, the password in the path
        ("redis://u:p@ss@h/0", "redis://u:***@h/0"),  # an '@' in the password
    ],
)
def test_printed_urls_hide_every_password(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.mark.parametrize(
    "url", ["reddis://:s3cretPW@127.0.0.1:6390/0", "http://u:s3cretPW@h/0", "redis:/:s3cretPW@127.0.0.1/0"]
)
@pytest.mark.parametrize("command", [["stats"], ["doctor"], ["doctor", "--json"]])
def test_a_url_no_broker_takes_is_refused_without_its_password(empty_dir: Path, url: str, command: list[str]) -> None:
    result = run("--url", url, *command)
    assert result.exit_code == 1
    assert "s3cretPW" not in result.output + result.stderr and "***" in result.output + result.stderr


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:notaport/0", "redis://127.0.0.1:99999/0", "redis://[::1]:x/0", "rediss://h:0/0"],
)
def test_a_port_that_is_no_port_is_named_with_the_expected_form(empty_dir: Path, url: str) -> None:
    result = run("--url", url, "stats")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: bad redis URL {url!r}: each port must be a number from 1 to 65535"
        " (redis://[user:password@]host[:port][/db])\n"
    )
