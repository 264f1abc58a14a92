"""The supervisor's reading of its children's reports (the real processes: tests/faults)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from conveyor.worker.config import WorkerConfig
from conveyor.worker.supervisor import Child, Supervisor


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    (tmp_path / "reports_app.py").write_text('from conveyor import Conveyor\napp = Conveyor("memory://")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    sup = Supervisor("reports_app:app", WorkerConfig(processes=1))
    yield sup
    sup.app.close()


@pytest.fixture
def child() -> Child:
    return Child(0, cast("subprocess.Popen[bytes]", None), reports=-1)


def test_a_reported_cancel_marks_the_running_task_until_it_ends(supervisor: Supervisor, child: Child) -> None:
    supervisor._report(child, "start t1 tok1 -")
    supervisor._report(child, "cancel t1 tok1")
    assert list(child.cancelled) == ["t1"]
    supervisor._report(child, "end t1")
    assert child.cancelled == {}


def test_a_cancel_reported_before_its_start_counts_for_that_claim_only(supervisor: Supervisor, child: Child) -> None:
    """The child's heartbeat and pool write from different threads, so a cancel can come first; one
    of an earlier claim of the same id (another token) must not mark a later run."""
    supervisor._report(child, "cancel t1 tok1")
    supervisor._report(child, "cancel t2 old")
    supervisor._report(child, "start t1 tok1 -")
    supervisor._report(child, "start t2 new -")
    assert list(child.cancelled) == ["t1"]


def test_a_cancel_of_another_claim_of_a_running_id_is_ignored(supervisor: Supervisor, child: Child) -> None:
    supervisor._report(child, "start t1 new -")
    supervisor._report(child, "cancel t1 old")
    assert child.cancelled == {}
