"""The children's reports and the supervisor's reading of them (the real processes: tests/faults)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from conveyor.model import TaskRecord, TaskState
from conveyor.worker.child import PipeReporter
from conveyor.worker.config import WorkerConfig
from conveyor.worker.inflight import Held
from conveyor.worker.supervisor import CANCEL_GRACE, KILL_SLACK, Child, Supervisor


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


def test_a_start_reported_late_keeps_the_deadline_of_the_childs_start(supervisor: Supervisor, child: Child) -> None:
    started = time.monotonic() - 10.0  # the child's clock: the system-wide monotonic one
    supervisor._report(child, f"start t1 tok1 2.5 {started!r}")
    supervisor._report(child, f"cancel t1 tok1 {started + 1.0!r}")
    assert child.running["t1"] == ("tok1", started + 2.5 + KILL_SLACK)
    assert child.cancelled["t1"] == started + 1.0 + CANCEL_GRACE


def _held(task_id: str, started: float) -> Held:
    record = TaskRecord(task_id, "job", "default", TaskState.ACTIVE, "[]", "{}", 0, 0.0, 0.0, None)
    held = Held(record, f"tok-{task_id}")
    held.started = started
    return held


def _read_all(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode()
    except BlockingIOError:
        return ""


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def test_a_task_that_ends_before_its_reports_are_written_is_never_reported(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    reporter = PipeReporter(write_fd)  # not started: only close() writes
    quick, slow = _held("quick", 5.0), _held("slow", 6.0)
    reporter.started(quick)
    reporter.started(slow)
    reporter.cancelled(quick)
    reporter.finished(quick)
    reporter.close()
    assert _read_all(read_fd) == "start slow tok-slow - 6.0\n"


def test_reports_are_written_together_by_the_reporting_thread(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    reporter = PipeReporter(write_fd, delay=0.01)
    reporter.start()
    try:
        first, second = _held("a", 1.0), _held("b", 2.0)
        reporter.started(first)
        reporter.started(second)
        assert select.select([read_fd], [], [], 10.0)[0]
        reporter.finished(first)
        lines: list[str] = []
        while len(lines) < 3:
            assert select.select([read_fd], [], [], 10.0)[0], lines
            lines += _read_all(read_fd).splitlines()
    finally:
        reporter.close()
    assert lines == ["start a tok-a - 1.0", "start b tok-b - 2.0", "end a"]


def _lines_until(fd: int, count: int) -> list[str]:
    lines: list[str] = []
    while len(lines) < count:
        assert select.select([fd], [], [], 10.0)[0], lines
        lines += _read_all(fd).splitlines()
    return lines


def test_the_end_of_a_reported_task_is_written_with_no_other_report_to_carry_it(pipe: tuple[int, int]) -> None:
    """The pool only notes which tasks run; an end alone must still reach the supervisor, or it would
    kill the child for a task past its timeout that had ended long before."""
    read_fd, write_fd = pipe
    reporter = PipeReporter(write_fd, delay=0.01)
    reporter.start()
    try:
        held = _held("a", 1.0)
        reporter.started(held)
        assert _lines_until(read_fd, 1) == ["start a tok-a - 1.0"]
        reporter.finished(held)
        assert _lines_until(read_fd, 1) == ["end a"]
    finally:
        reporter.close()


def test_a_cancel_noted_just_before_its_start_is_written_after_that_start(pipe: tuple[int, int]) -> None:
    """The heartbeat may note a cancel between ``Inflight.start`` and the pool's ``started``."""
    read_fd, write_fd = pipe
    reporter = PipeReporter(write_fd)  # not started: each close() looks once
    held = _held("a", 1.0)
    reporter.cancelled(held)
    reporter._flush()
    assert _read_all(read_fd) == ""
    reporter.started(held)
    reporter.close()
    start, cancel = _read_all(read_fd).splitlines()
    assert start == "start a tok-a - 1.0" and cancel.startswith("cancel a tok-a ")
