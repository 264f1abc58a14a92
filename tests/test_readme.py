"""The README's examples run as written: the quickstart with a real ``conveyor worker`` process, and
every other Python block."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS: list[str] = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _named(name: str) -> str:
    for block in BLOCKS:
        if block.startswith(f"# {name}\n"):
            return block
    raise AssertionError(f"README has no python block starting with '# {name}'")


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("conveyor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "conveyor"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_quickstart_runs_with_a_real_worker_process(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    tasks = _named("tasks.py")
    if backend == "redis":  # the same example on the private test server
        assert 'Conveyor("sqlite:///conveyor.db")' in tasks
        tasks = tasks.replace("sqlite:///conveyor.db", request.getfixturevalue("redis_url"))
    (tmp_path / "tasks.py").write_text(tasks)
    (tmp_path / "producer.py").write_text(_named("producer.py"))
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"}
    env["PYTHONPATH"] = str(tmp_path)
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [*_cli(), "worker", "tasks:app", "--concurrency", "8"], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
    try:
        producer = subprocess.run(
            [sys.executable, "producer.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert producer.returncode == 0, producer.stderr + (tmp_path / "worker.log").read_text()
        assert producer.stdout.strip() == "sent 'Welcome' to ada@example.com"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
    assert (tmp_path / "conveyor.db").exists() is (backend == "sqlite")


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if not b.startswith(("# tasks.py", "# producer.py"))], ids=lambda b: b.split("\n")[0]
)
def test_readme_block_runs(block: str) -> None:
    app = Conveyor("memory://")
    try:
        exec(compile(block, str(README), "exec"), {"app": app, "__name__": "readme"})
    finally:
        app.close()
