"""The whole conformance suite on layout 4 (``layout4_plugin.py``: one slot per namespace), in a pytest
process of its own: the layout the version before stored, which the upgrade tests write with as that
version did (``test_redis_upgrade.py``), so its brokers must still keep every rule of the contract.
The suite's own Redis runs are on layout 5, the default, on one server and on the 3-master cluster.

On one server only. What a cluster would add for layout 4 is checked more cheaply elsewhere: every
layout-4 script touches only the one slot it declares (``test_redis_slots.py``, every operation under
``MONITOR``: what a cluster refuses as ``CROSSSLOT``), the cluster client is the one layout 5 runs the
whole suite through, and the upgrade tests write every task state with layout 4's broker on the
cluster. The cluster's run here took 19-35 s of every ``make test`` for none of that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_conformance_suite_passes_on_layout_4(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.brokers.layout4_plugin",
         "-m", "", "-k", "redis and not cluster", f"--basetemp={tmp_path / 'run'}", "tests/conformance"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
