"""``doctor``: each check reported OK / WARN / FAIL; exit 1 only on FAIL."""

from __future__ import annotations

import json
from collections.abc import Callable

from click.testing import CliRunner, Result

from conveyor import Conveyor
from conveyor.brokers.base import Finding
from conveyor.brokers.memory import MemoryBroker
from conveyor.brokers.sqlite.schema import SCHEMA_VERSION
from conveyor.cli import cli as cli_group
from conveyor.cli.state import CliState

Invoke = Callable[..., Result]


def checks(result: Result) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in json.loads(result.stdout)}


def test_doctor_reports_a_reachable_broker(cli: Invoke, broker_url: str) -> None:
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    found = checks(result)
    assert found["broker"][0] == "OK"
    assert found["workers"] == ("WARN", "no live worker")
    if broker_url.startswith("sqlite"):
        assert found.get("journal_mode", ("OK", ""))[0] == "OK"
    table = cli("doctor").stdout
    assert "broker" in table and "OK" in table
    assert "[" not in table, table  # its statuses as words, no style markup printed as text


def test_doctor_warns_about_paused_queues(cli: Invoke, app: Conveyor) -> None:
    app.enqueue("a", queue="held")
    app.inspect.pause("held")
    assert checks(cli("doctor", "--json"))["paused queues"] == ("WARN", "held")


class _RiskyBroker(MemoryBroker):
    """A broker with the optional capability doctor looks for (``ChecksServer``)."""

    def preflight(self) -> list[Finding]:
        return [
            Finding("journal_mode", False, "delete (expected wal)"),
            Finding("schema_version", True, "3"),
            Finding("maxmemory-policy", False, "'allkeys-lru' lets Redis evict task data; set it to 'noeviction'"),
        ]


def test_doctor_reports_optional_broker_capabilities() -> None:
    app = Conveyor(broker=_RiskyBroker())
    result = CliRunner().invoke(cli_group, ["doctor", "--json"], obj=CliState(app=app))
    assert result.exit_code == 0, result.output
    found = checks(result)
    assert found["journal_mode"] == ("WARN", "delete (expected wal)")
    assert found["schema_version"] == ("OK", "3")
    assert found["maxmemory-policy"][0] == "WARN" and "noeviction" in found["maxmemory-policy"][1]


def test_doctor_fails_on_an_unreachable_broker() -> None:
    result = CliRunner().invoke(cli_group, ["--url", "redis://:secret@127.0.0.1:1/0", "doctor", "--json"])
    assert result.exit_code == 1
    status, detail = checks(result)["broker"]
    assert status == "FAIL"
    assert "secret" not in detail and "***" in detail


def test_bad_url_is_one_line_error_without_traceback() -> None:
    result = CliRunner().invoke(cli_group, ["--url", "bogus://x", "stats"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: unsupported broker URL 'bogus://x'")
    assert "Traceback" not in result.output


class _FailingBroker(MemoryBroker):
    """A finding whose calls fail now (too few replicas for ``wait_replicas``), not a risk alone."""

    def preflight(self) -> list[Finding]:
        return [Finding("replicas", False, "0 connected, wait_replicas=1: every enqueue fails", failing=True)]


def test_doctor_fails_on_a_finding_that_makes_calls_fail_now() -> None:
    """It said WARN and exited 0 while its own text said every enqueue fails."""
    app = Conveyor(broker=_FailingBroker())
    result = CliRunner().invoke(cli_group, ["doctor", "--json"], obj=CliState(app=app))
    assert result.exit_code == 1, result.output
    assert checks(result)["replicas"][0] == "FAIL"


def test_doctor_checks_each_broker_with_its_own_checks(cli: Invoke, broker_url: str) -> None:
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    found = checks(result)
    names = {
        "memory": ["broker", "workers", "task declarations"],
        "sqlite": ["broker", "journal_mode", "schema_version", "workers", "task declarations"],
        "redis": ["broker", "maxmemory-policy", "persistence", "workers", "task declarations"],
    }[broker_url.split(":", 1)[0]]
    assert list(found) == names
    assert found["broker"][0] == "OK"
    if "journal_mode" in found:
        assert found["journal_mode"] == ("OK", "wal")
        assert found["schema_version"] == ("OK", str(SCHEMA_VERSION))
    if "persistence" in found:  # the test server keeps nothing on disk
        assert found["maxmemory-policy"] == ("OK", "noeviction")
        assert found["persistence"][0] == "WARN"
