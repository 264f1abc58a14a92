"""The code block of the core issue, line by line, with a FakeClock."""

from __future__ import annotations

import pytest

from conveyor import (
    Conveyor,
    DuplicateTask,
    Exponential,
    FakeClock,
    TaskHandle,
    TaskInfo,
    TaskState,
)

EMPTY = {"scheduled": 0, "pending": 0, "active": 0, "retry": 0, "completed": 0, "archived": 0, "total": 0}


def test_fake_clock_tells_advances_and_sets_time_and_is_callable() -> None:
    clock = FakeClock(0.0)
    assert clock.now() == clock() == 0.0
    assert clock.advance(5) == 5.0
    clock.set(100.0)
    assert clock() == 100.0


def test_the_worked_example(broker_url: str) -> None:
    clock = FakeClock(0.0)
    app = Conveyor(broker_url, clock=clock)
    try:
        sent: list[tuple[str, str]] = []

        @app.task(
            name=None,
            queue="default",
            max_retries=3,
            backoff=Exponential(initial=1.0, factor=2.0, max=3600.0, jitter=False),
            retry_on=(Exception,),
            timeout=None,
            priority=0,
            retention=3600.0,
            expires=None,
        )
        def send_email(to: str, subject: str) -> str:
            sent.append((to, subject))
            return f"sent to {to}"

        h = send_email.enqueue("a@x.com", subject="hi")
        assert isinstance(h, TaskHandle) and isinstance(h.id, str)
        first = h

        h = send_email.with_options(task_id="welcome-42", delay=30, priority=5, unique_for=600).enqueue(
            "b@x.com", subject="welcome"
        )
        assert h.id == "welcome-42"
        welcome = app.get("welcome-42")
        assert (welcome.state, welcome.next_run_at, welcome.priority) == (TaskState.SCHEDULED, 30.0, 5)
        with pytest.raises(DuplicateTask) as dup:
            send_email.with_options(unique_for=600).enqueue("b@x.com", subject="welcome")
        assert dup.value.existing_id == "welcome-42"

        h = app.enqueue("send_email", args=["a@x.com"], kwargs={"subject": "hi"}, delay=5)
        by_name = h

        info = app.get(first.id)
        assert isinstance(info, TaskInfo)
        assert (info.name, info.state, info.args, info.kwargs) == (
            "send_email",
            TaskState.PENDING,
            ["a@x.com"],
            {"subject": "hi"},
        )
        assert first.status() == info
        assert app.stats() == {"default": {**EMPTY, "scheduled": 2, "pending": 1, "total": 3}}

        w = app.worker(queues=["default"])
        assert w.process_next() is True
        assert w.process_next() is False
        assert first.result(timeout=10) == "sent to a@x.com"
        assert w.run_until_idle() == 0

        clock.advance(5)
        assert w.run_until_idle() == 1
        assert app.get(by_name.id).state is TaskState.COMPLETED
        clock.advance(25)
        assert w.run_until_idle() == 1
        assert sent == [("a@x.com", "hi"), ("a@x.com", "hi"), ("b@x.com", "welcome")]
        assert app.stats() == {"default": {**EMPTY, "completed": 3, "total": 3}}
    finally:
        app.close()
