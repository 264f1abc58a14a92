"""A running worker publishes its tasks' declarations; a producer without the handlers uses them."""

from __future__ import annotations

import logging

import pytest

from conveyor import Conveyor
from conveyor.testing import poll_until

from .conftest import Start


def test_a_starting_worker_declares_every_registered_task(live_app: Conveyor, start_worker: Start) -> None:
    @live_app.task(queue="emails", max_retries=7, timeout=12)
    def send_email(to: str) -> None: ...

    @live_app.task
    def plain() -> None: ...

    start_worker(queues=["emails", "default"])
    poll_until(lambda: len(live_app.declared.all()) == 2, message="the worker's declarations")
    declared = live_app.declared.all()
    assert sorted(declared) == ["plain", "send_email"]
    email = declared["send_email"]
    assert (email.queue, email.max_retries, email.timeout) == ("emails", 7, 12.0)
    assert declared["plain"].queue == "default"


def test_by_name_task_reaches_the_worker_on_its_declared_queue(live_app: Conveyor, start_worker: Start) -> None:
    ran: list[str] = []

    @live_app.task(queue="emails")
    def send_email(to: str) -> None:
        ran.append(to)

    start_worker(queues=["emails"])
    poll_until(lambda: live_app.declaration("send_email") is not None, message="the declaration")
    producer = Conveyor(broker=live_app.broker)
    producer.enqueue("send_email", ["a@x"])
    poll_until(lambda: ran == ["a@x"], message="the task to run on the emails worker")


def test_a_worker_told_no_queues_warns_of_the_app_queues_it_leaves_unserved(
    live_app: Conveyor, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    @live_app.task(queue="emails")
    def send_email(to: str) -> None: ...

    @live_app.task(queue="reports")
    def report() -> None: ...

    @live_app.task
    def plain() -> None: ...

    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        start_worker()
    [line] = [record.getMessage() for record in caplog.records if "serves queue" in record.getMessage()]
    assert line.endswith(
        "serves queue default only (no queues given), but the app's tasks send_email (emails), report (reports) "
        "go to emails, reports: serve them with --queues default,emails,reports"
    )

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        start_worker(queues=["emails"])  # chosen: a fleet often splits its queues over its workers
    assert not [record for record in caplog.records if "serves queue" in record.getMessage()]


def test_the_unserved_queues_warning_names_ten_tasks_at_most(
    live_app: Conveyor, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(12):
        live_app.task(name=f"t{i:02d}", queue="bulk")(lambda: None)
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        start_worker()
    [line] = [record.getMessage() for record in caplog.records if "serves queue" in record.getMessage()]
    named = ", ".join(f"t{i:02d} (bulk)" for i in range(10))
    assert f"the app's tasks {named} and 2 more go to bulk: serve them with --queues default,bulk" in line
