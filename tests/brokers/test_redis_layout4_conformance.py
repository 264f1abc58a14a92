"""The whole conformance suite on layout 4 (``layout4_plugin.py``: one slot per namespace), in a pytest
process of its own: the layout the version before stored, which the upgrade tests write with as that
version did (``test_redis_upgrade.py``), so its brokers must still keep every rule of the contract,
on one server and on the 3-master cluster. The suite's own Redis runs are on layout 5, the default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
def test_the_conformance_suite_passes_on_layout_4(tmp_path: Path, backend: str) -> None:
    selected = "redis and not cluster" if backend == "redis" else "redis-cluster"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.brokers.layout4_plugin",
         "-m", "", "-k", selected, f"--basetemp={tmp_path / 'run'}", "tests/conformance"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
