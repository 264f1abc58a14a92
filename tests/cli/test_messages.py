"""Every user mistake or environment problem is one clean line on stderr, naming what to fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from conveyor.cli import cli as cli_group
from conveyor.testing.redis_server import free_port
from conveyor.worker.loader import load_app

from .test_tasks import Invoke


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a tasks module on ``memory://``; CONVEYOR_* unset."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("CONVEYOR_")]:
        monkeypatch.delenv(name)
    (tmp_path / "msg_tasks.py").write_text("from conveyor import Conveyor\n\napp = Conveyor('memory://')\n")
    return tmp_path


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli_group, list(args), catch_exceptions=False)


def test_unreachable_redis_is_one_line_without_a_log_line(here: Path) -> None:
    port = free_port()
    result = run("--url", f"redis://127.0.0.1:{port}/0", "stats")
    assert result.exit_code == 1
    assert (
        result.stderr == f"Error: Redis is unreachable: Error 111 connecting to 127.0.0.1:{port}. Connection refused.\n"
    )


def test_dashboard_port_in_use_names_the_address(here: Path, busy_port: int) -> None:
    result = run("--url", "memory://", "dashboard", "--port", str(busy_port))
    assert result.exit_code == 1
    assert result.stderr == f"Error: cannot serve the dashboard on 127.0.0.1:{busy_port}: address already in use\n"


def test_metrics_port_in_use_names_the_address(here: Path, busy_port: int) -> None:
    result = run("worker", "msg_tasks:app", "--metrics-port", str(busy_port))
    assert result.exit_code == 1
    assert result.stderr == (
        "worker msg_tasks:app on memory://, queues default\n"
        f"Error: cannot serve metrics on 127.0.0.1:{busy_port}: address already in use\n"
    )


@pytest.mark.slow
def test_dashboard_on_ipv6_prints_a_bracketed_url(here: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "--url", "memory://", "dashboard", "--host", "::1", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert line.startswith("dashboard for memory:// on http://[::1]:") and line.endswith("/\n")


def test_worker_app_path_to_a_missing_file_is_one_line(here: Path) -> None:
    result = run("worker", "../dash/shop:app")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: bad app reference '../dash/shop:app': no file ../dash/shop.py; expected 'pkg.module:app'"
        " (importable from the current directory) or 'path/to/module.py:app'\n"
    )


def test_an_app_reference_may_be_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dash").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "dash" / "shop_by_path.py").write_text(
        textwrap.dedent(
            """
            from conveyor import Conveyor

            app = Conveyor("memory://")

            @app.task
            def buy() -> None: ...
            """
        )
    )
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("CONVEYOR_WORKER_URL", raising=False)
    assert list(load_app("../dash/shop_by_path:app").registry) == ["buy"]
    assert load_app("../dash/shop_by_path.py:app") is load_app("../dash/shop_by_path:app")


def test_task_not_found_names_the_id_once(cli: Invoke) -> None:
    result = cli("cancel", "missing")
    assert result.exit_code == 1
    assert result.stderr == "Error: task not found: 'missing'\n"
