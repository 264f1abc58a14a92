"""A running worker publishes its tasks' declarations; a producer without the handlers uses them."""

from __future__ import annotations

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
