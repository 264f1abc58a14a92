"""Rolling deploys: a worker never drops a task whose name it does not know."""

from __future__ import annotations

import pytest

from conveyor import ArchiveReason, Conveyor, FakeClock, TaskState, Worker


@pytest.fixture
def patient_worker(app: Conveyor) -> Worker:
    return app.worker(unregistered_delay=5.0, unregistered_window=20.0)


def test_unknown_task_name_is_put_back_with_a_delay(
    app: Conveyor, producer: Conveyor, clock: FakeClock, patient_worker: Worker
) -> None:
    handle = producer.enqueue("added_in_next_release", args=[1])
    assert patient_worker.process_next()
    info = app.get(handle.id)
    assert (info.state, info.next_run_at, info.attempts) == (TaskState.SCHEDULED, clock.now() + 5.0, 0)
    assert info.last_error is not None and "added_in_next_release" in info.last_error
    assert not patient_worker.process_next()


def test_unknown_task_name_is_archived_unregistered_after_the_window(
    app: Conveyor, producer: Conveyor, clock: FakeClock, patient_worker: Worker
) -> None:
    handle = producer.enqueue("never_deployed")
    for _ in range(10):
        if app.get(handle.id).state is TaskState.ARCHIVED:
            break
        patient_worker.process_next()
        clock.advance(5.0)
    info = app.get(handle.id)
    assert (info.state, info.archive_reason) == (TaskState.ARCHIVED, ArchiveReason.UNREGISTERED)
    assert info.finished_at is not None and info.finished_at >= info.enqueued_at + 20.0


def test_put_back_task_runs_once_a_handler_for_it_is_registered(
    app: Conveyor, producer: Conveyor, clock: FakeClock, patient_worker: Worker
) -> None:
    handle = producer.enqueue("late_bloomer", args=[21])
    patient_worker.process_next()

    @app.task
    def late_bloomer(n: int) -> int:
        return n * 2

    clock.advance(5.0)
    assert patient_worker.process_next()
    assert app.get(handle.id).result == 42


def test_tasks_registered_after_the_worker_was_created_are_served(app: Conveyor) -> None:
    worker = app.worker()

    @app.task
    def registered_later() -> str:
        return "served"

    handle = registered_later.enqueue()
    assert worker.process_next()
    assert app.get(handle.id).result == "served"


def test_an_unknown_task_name_names_the_registered_one_it_likely_means(
    app: Conveyor, producer: Conveyor, patient_worker: Worker
) -> None:
    @app.task
    def send_email(to: str) -> None: ...

    qualified = producer.enqueue("tasks.send_email", args=["a@x"])  # Celery's module.function
    unrelated = producer.enqueue("compact_database")
    assert patient_worker.process_next() and patient_worker.process_next()
    error = app.get(qualified.id).last_error
    assert error is not None and "no handler registered for task name 'tasks.send_email'" in error
    assert "(did you mean 'send_email'?)" in error
    error = app.get(unrelated.id).last_error
    assert error is not None and "did you mean" not in error
