"""The whole conformance suite on split slots: its Redis tests run again, in a pytest process of their
own whose brokers give every queue a slot of its own (``split_plugin.py``), so every rule of the
contract (uniqueness of ids and keys across queues above all) is checked where one call can no longer
see two queues: on one server, and on the 3-master cluster, which refuses any call that touches a key
outside the slot it declared (the queues' slots spread over its masters)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
def test_the_conformance_suite_passes_with_every_queue_in_a_slot_of_its_own(tmp_path: Path, backend: str) -> None:
    selected = "redis and not cluster" if backend == "redis" else "redis-cluster"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.brokers.split_plugin",
         "-m", "", "-k", selected, f"--basetemp={tmp_path / 'run'}", "tests/conformance"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
