"""The worker's log at INFO: one summary line per interval instead of two lines per task."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from conveyor import Conveyor, Worker, WorkerConfig
from conveyor.retry import Fixed
from conveyor.testing import poll_until
from conveyor.worker.args import config_from_args, config_to_args, parse
from conveyor.worker.summary import Summary

Start = Callable[..., Worker]


def summary_of(worker: Worker) -> Summary:
    assert worker.runtime is not None
    found = [s for s in worker.runtime.maintenance if isinstance(s, Summary)]
    assert len(found) == 1
    return found[0]


def test_summary_counts_what_ended_since_its_last_line(live_app: Conveyor, start_worker: Start) -> None:
    @live_app.task
    def ok() -> None:
        pass

    @live_app.task(max_retries=0)
    def boom() -> None:
        raise ValueError("boom")

    @live_app.task(max_retries=1, backoff=Fixed(0))
    def flaky() -> None:
        raise RuntimeError("always")

    for _ in range(5):
        ok.enqueue()
    boom.enqueue()
    flaky.enqueue()
    worker = start_worker(summary_interval=3600.0, promoter_interval=0.05)
    summary = summary_of(worker)
    poll_until(lambda: live_app.stats()["default"]["archived"] == 2, message="boom and flaky archived")
    poll_until(lambda: live_app.stats()["default"]["completed"] == 5, message="five done")
    line = summary.report(final=False)
    assert line is not None
    assert " 5 done, 2 failed, 1 retried " in line and line.endswith(" 0/10 slots busy")
    assert summary.report(final=False) is None  # nothing since: an idle worker writes nothing


def test_summary_reports_busy_slots_while_nothing_ends(live_app: Conveyor, start_worker: Start) -> None:
    gate, started = threading.Event(), threading.Event()

    @live_app.task
    def hold() -> None:
        started.set()
        gate.wait(10)

    hold.enqueue()
    worker = start_worker(summary_interval=3600.0, concurrency=4)
    summary = summary_of(worker)
    # its handler running, not only claimed (`active`): a claimed task may still wait in the buffer
    assert started.wait(10), "the task to start"
    try:
        line = summary.report(final=False)
        assert line is not None and " 0 done, 0 failed, 0 retried " in line and line.endswith(" 1/4 slots busy")
    finally:
        gate.set()


def test_summary_line_is_logged_every_interval_at_info(
    live_app: Conveyor, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    @live_app.task
    def ok() -> None:
        pass

    with caplog.at_level(logging.INFO, logger="conveyor"):
        ok.enqueue()
        start_worker(summary_interval=0.05)
        poll_until(lambda: any(" 1 done, " in r.getMessage() for r in caplog.records), message="a summary line")
    lines = [r for r in caplog.records if r.name == "conveyor.worker" and r.levelno == logging.INFO]
    assert not [r for r in lines if r.getMessage().startswith(("task started", "task completed"))]
    summary = next(r for r in lines if " 1 done, " in r.getMessage())
    assert summary.conveyor["event"] == "summary" and summary.conveyor["done"] == 1  # type: ignore[attr-defined]


def test_each_task_start_and_success_is_a_debug_line(
    live_app: Conveyor, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    @live_app.task
    def ok() -> None:
        pass

    with caplog.at_level(logging.DEBUG, logger="conveyor"):
        handle = ok.enqueue()
        start_worker()
        poll_until(lambda: any(r.getMessage().startswith("task completed") for r in caplog.records), message="a line")
    mine = [r for r in caplog.records if handle.id in r.getMessage()]
    assert [(r.levelno, r.getMessage().split()[1]) for r in mine] == [
        (logging.DEBUG, "started"),
        (logging.DEBUG, "completed"),
    ]


@pytest.mark.parametrize("interval", [None, 0.0])
def test_no_summary_when_its_interval_is_none_or_zero(
    live_app: Conveyor, start_worker: Start, interval: float | None
) -> None:
    worker = start_worker(summary_interval=interval)
    assert worker.runtime is not None
    assert not [s for s in worker.runtime.maintenance if isinstance(s, Summary)]


def test_summary_interval_from_env_and_through_child_arguments() -> None:
    assert WorkerConfig().summary_interval == 10.0
    assert WorkerConfig.from_env({"CONVEYOR_WORKER_SUMMARY_INTERVAL": "2.5"}).summary_interval == 2.5
    for interval in (None, 0.0, 30.0):
        config = WorkerConfig(summary_interval=interval)
        again = config_from_args(parse(["pkg:app", *config_to_args(config)]), WorkerConfig())
        assert again.summary_interval == (interval or 0.0)  # None and 0 both mean none
