"""Real processes: ``python -m conveyor`` end to end on SQLite (shared through a file): admin commands,
a worker with its metrics port, the dashboard server, and the demo. Every process is stopped."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from conveyor import Conveyor, TaskState
from conveyor.cli import cli as cli_group
from conveyor.testing import poll_until
from conveyor.testing.redis_server import free_port

from .procs import Spawn, clean_env, conveyor_argv

pytestmark = pytest.mark.slow


def conveyor(*args: str, url: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(conveyor_argv(*args), capture_output=True, text=True, env=clean_env(url), cwd=cwd, timeout=60)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def test_enqueue_ls_show_across_processes(sqlite_url: str) -> None:
    done = conveyor("enqueue", "send", "--args", '["a"]', "--task-id", "p-1", "--json", url=sqlite_url)
    assert done.returncode == 0, done.stderr
    listed = conveyor("ls", "--json", url=sqlite_url)
    assert [t["id"] for t in json.loads(listed.stdout)] == ["p-1"]
    shown = conveyor("show", "p-1", url=sqlite_url)
    assert shown.returncode == 0 and "Timeline" in shown.stdout


def test_user_mistake_exits_1_with_one_line_and_no_traceback(sqlite_url: str) -> None:
    assert conveyor("enqueue", "x", url=sqlite_url).returncode == 0  # the database exists
    done = conveyor("show", "missing", url=sqlite_url)
    assert done.returncode == 1
    assert done.stderr == "Error: task not found: 'missing'\n"


def test_worker_runs_tasks_and_serves_metrics(tmp_path: Path, sqlite_url: str, spawn: Spawn) -> None:
    (tmp_path / "cli_tasks.py").write_text(
        textwrap.dedent(
            f"""
            from conveyor import Conveyor

            app = Conveyor({sqlite_url!r})

            @app.task
            def add(a: int, b: int) -> int:
                return a + b
            """
        )
    )
    assert conveyor("enqueue", "add", "--args", "[2, 3]", "--task-id", "sum", url=sqlite_url).returncode == 0
    port = free_port()
    worker = spawn(
        ["worker", "cli_tasks:app", "-c", "2", "--metrics-port", str(port)], env=clean_env(sqlite_url), cwd=tmp_path
    )
    app = Conveyor(sqlite_url)
    try:
        poll_until(
            lambda: app.get("sum").state == TaskState.COMPLETED,
            timeout=20.0,
            interval=0.05,
            message="the task to complete",
        )
        assert app.get("sum").result == 5

        def scraped() -> str:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                return ""

        poll_until(
            lambda: 'conveyor_tasks_processed_total{queue="default",task="add"} 1.0' in scraped(),
            timeout=20.0,
            interval=0.05,
            message="metrics",
        )
        text = scraped()
        assert 'conveyor_queue_tasks{queue="default",state="completed"} 1.0' in text
        assert "conveyor_task_duration_seconds_count" in text
    finally:
        app.close()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


def test_worker_with_a_bad_app_path_is_one_line_error(tmp_path: Path, sqlite_url: str) -> None:
    done = conveyor("worker", "no_such_module:app", url=sqlite_url, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: cannot import 'no_such_module'")
    assert "Traceback" not in done.stderr


def test_dashboard_serves_until_terminated(sqlite_url: str, spawn: Spawn) -> None:
    port = free_port()
    server = spawn(["dashboard", "--port", str(port)], env=clean_env(sqlite_url))

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            assert server.poll() is None, "the dashboard exited"
            return False

    poll_until(healthy, timeout=20.0, interval=0.05, message="the dashboard")
    page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    assert page.status_code == 200 and "Queues" in page.text
    server.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why it stopped.
    assert server.wait(timeout=20) in (0, -signal.SIGTERM)
    assert "Traceback" not in (server.stderr.read() if server.stderr else "")


def test_dashboard_refuses_a_public_address_without_auth() -> None:
    result = CliRunner().invoke(cli_group, ["--url", "memory://", "dashboard", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "set --token or --basic-auth" in result.stderr


def test_dashboard_rejects_malformed_basic_auth() -> None:
    result = CliRunner().invoke(cli_group, ["--url", "memory://", "dashboard", "--basic-auth", "nopassword"])
    assert result.exit_code == 2
    assert "USER:PASSWORD" in result.stderr


def scrape_metrics(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return ""


def series(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one series in an exposition."""
    found = {}
    for match in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE):
        found[match.group(1) or ""] = float(match.group(2))
    return found


def test_process_mode_exports_the_summed_counters_of_every_child(tmp_path: Path, sqlite_url: str, spawn: Spawn) -> None:
    (tmp_path / "pm_tasks.py").write_text(
        textwrap.dedent(
            """
            from conveyor import Conveyor

            app = Conveyor()

            @app.task
            def add(a: int, b: int) -> int:
                return a + b

            @app.task(max_retries=0)
            def fail() -> None:
                raise ValueError("no")

            @app.task(queue="mail")
            def mail() -> None: ...
            """
        )
    )
    with Conveyor(sqlite_url) as producer:
        producer.enqueue_many("add", [([i, i], {}) for i in range(40)])
        producer.enqueue_many("fail", [([], {}) for _ in range(5)])
    port = free_port()
    worker = spawn(
        ["worker", "pm_tasks:app", "-p", "2", "-c", "2", "--metrics-port", str(port)],
        env=clean_env(sqlite_url),
        cwd=tmp_path,
    )
    processed = 'conveyor_tasks_processed_total{queue="default",task="add"} 40.0'
    failed = 'conveyor_tasks_processed_total{queue="default",task="fail"} 5.0'
    poll_until(
        lambda: processed in (text := scrape_metrics(port)) and failed in text,
        timeout=20.0,
        interval=0.05,
        message="every task counted",
    )
    text = scrape_metrics(port)
    assert series(text, "conveyor_tasks_failed_total") == {'{queue="default",task="fail"}': 5.0}
    assert series(text, "conveyor_task_duration_seconds_count") == {
        '{queue="default",task="add"}': 40.0,
        '{queue="default",task="fail"}': 5.0,
    }
    # broker-wide gauges: once, from the supervisor (not once per child)
    depth = series(text, "conveyor_queue_tasks")
    assert depth['{queue="default",state="completed"}'] == 40.0
    assert depth['{queue="default",state="archived"}'] == 5.0
    assert len(series(text, "conveyor_broker_up")) == 1
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert "middleware" not in stderr
    # the queue the children leave unserved: said once, by the supervisor, not once per child
    [warning] = [line for line in stderr.splitlines() if "serves queue default only" in line]
    assert re.search(r" WARNING conveyor\.worker: supervisor \d+ serves queue default only ", warning), warning
    assert warning.endswith("the app's tasks mail (mail) go to mail: serve them with --queues default,mail"), warning
