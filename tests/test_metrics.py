"""Prometheus metrics: counters and durations from the worker middleware, queue gauges from the broker."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from conveyor import ArchiveReason, Conveyor, DuplicateTask, QueueFull, Retry
from conveyor.errors import BrokerUnavailable
from conveyor.metrics import Metrics
from conveyor.model import WorkerInfo
from conveyor.testing import SpyBroker


class StepTimer:
    """A fake timer: each reading is 0.25 s after the previous one."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.25
        return self.t


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_middleware_counts_processed_failed_and_retried_by_queue_and_task(app: Conveyor) -> None:
    metrics = Metrics(app, timer=StepTimer())

    @app.task(queue="mail")
    def ok() -> None:
        pass

    @app.task(max_retries=1)
    def flaky() -> None:
        raise Retry(delay=0)

    ok.enqueue()
    ok.enqueue()
    flaky.enqueue()
    app.worker(queues=["mail", "default"], middleware=(metrics.middleware(),)).run_until_idle()
    assert sample(metrics, "conveyor_tasks_processed_total", queue="mail", task="ok") == 2
    assert sample(metrics, "conveyor_tasks_processed_total", queue="default", task="flaky") == 2
    assert sample(metrics, "conveyor_tasks_failed_total", queue="default", task="flaky") == 2
    assert sample(metrics, "conveyor_tasks_retried_total", queue="default", task="flaky") == 1
    assert sample(metrics, "conveyor_tasks_failed_total", queue="mail", task="ok") is None


def test_a_result_that_cannot_be_stored_counts_as_a_failure(app: Conveyor) -> None:
    """Archived permanent without raising: failed_total missed it, where the dashboard's history and
    the worker's own count had it."""
    metrics = Metrics(app, timer=StepTimer())

    @app.task
    def unstorable() -> object:
        return object()  # not JSON

    handle = unstorable.enqueue()
    app.worker(middleware=(metrics.middleware(),)).run_until_idle()
    assert app.get(handle.id).archive_reason is ArchiveReason.PERMANENT
    assert sample(metrics, "conveyor_tasks_failed_total", queue="default", task="unstorable") == 1
    assert sample(metrics, "conveyor_tasks_processed_total", queue="default", task="unstorable") == 1


def test_middleware_observes_durations_as_a_histogram(app: Conveyor) -> None:
    metrics = Metrics(app, timer=StepTimer())

    @app.task
    def job() -> None:
        pass

    job.enqueue()
    app.worker(middleware=(metrics.middleware(),)).run_until_idle()
    labels = {"queue": "default", "task": "job"}
    assert sample(metrics, "conveyor_task_duration_seconds_count", **labels) == 1
    assert sample(metrics, "conveyor_task_duration_seconds_sum", **labels) == 0.25
    assert sample(metrics, "conveyor_task_duration_seconds_bucket", le="0.25", **labels) == 1
    assert sample(metrics, "conveyor_task_duration_seconds_bucket", le="0.1", **labels) == 0


def test_queue_depth_paused_and_oldest_pending_age(app: Conveyor) -> None:
    metrics = Metrics(app)
    app.enqueue("a", queue="mail")
    app.enqueue("b", queue="mail", delay=30)
    app.inspect.pause("mail")
    app.clock.advance(12)  # type: ignore[attr-defined]
    assert sample(metrics, "conveyor_queue_tasks", queue="mail", state="pending") == 1
    assert sample(metrics, "conveyor_queue_tasks", queue="mail", state="scheduled") == 1
    assert sample(metrics, "conveyor_queue_tasks", queue="mail", state="archived") == 0
    assert sample(metrics, "conveyor_queue_paused", queue="mail") == 1
    assert sample(metrics, "conveyor_queue_oldest_pending_age_seconds", queue="mail") == 12
    assert sample(metrics, "conveyor_broker_up") == 1


def test_worker_count_follows_heartbeats(app: Conveyor) -> None:
    metrics = Metrics(app)
    assert sample(metrics, "conveyor_workers") == 0
    app.broker.register_worker(WorkerInfo("w1", "h", 1, ("default",), 1, app.now()), app.now(), ttl=10)
    assert sample(metrics, "conveyor_workers") == 1


def test_an_unreachable_broker_reports_down_instead_of_failing_the_scrape() -> None:
    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy)
    metrics = Metrics(app)
    spy.fail("queues", BrokerUnavailable("gone"), times=None)
    assert sample(metrics, "conveyor_broker_up") == 0
    assert b"conveyor_broker_up 0.0" in metrics.render()
    app.close()


def test_metrics_use_a_private_registry(app: Conveyor) -> None:
    Metrics(app)
    Metrics(app)  # a second one does not clash
    assert REGISTRY.get_sample_value("conveyor_workers") is None


def test_enqueues_are_counted_by_queue_and_task(app: Conveyor) -> None:
    metrics = Metrics(app)

    @app.task(queue="mail")
    def send(to: str) -> None:
        pass

    send.enqueue("a")
    send.with_options(queue="urgent").enqueue("b")
    app.enqueue("report", queue="mail")
    send.enqueue_many([(("c",), {}), (("d",), {})])
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="mail", task="send") == 3
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="urgent", task="send") == 1
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="mail", task="report") == 1


def test_duplicates_and_refused_enqueues_are_not_counted(app: Conveyor) -> None:
    metrics = Metrics(app)
    app.configure_queue("small", max_size=1)
    app.enqueue("job", task_id="t1")
    with pytest.raises(DuplicateTask):
        app.enqueue("job", task_id="t1")
    app.enqueue_many("job", [((1,), {}), ((1,), {}), ((2,), {})], unique_for=60)  # the second is a duplicate
    app.enqueue("job", queue="small")
    with pytest.raises(QueueFull):
        app.enqueue("job", queue="small")
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="default", task="job") == 3
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="small", task="job") == 1


def test_enqueued_and_claim_duration_series_are_present_and_move_after_a_drain(app: Conveyor) -> None:
    metrics = Metrics(app)

    @app.task
    def job(n: int) -> None:
        pass

    worker = app.worker(middleware=(metrics.middleware(),))
    seen: list[tuple[float, float, float]] = []
    for batch in (3, 2):
        job.enqueue_many([((n,), {}) for n in range(batch)])
        assert worker.run_until_idle() == batch
        text = metrics.render().decode()
        assert "conveyor_tasks_enqueued_total{" in text
        assert "conveyor_claim_duration_seconds_count " in text
        seen.append(
            (
                sample(metrics, "conveyor_tasks_enqueued_total", queue="default", task="job") or 0.0,
                sample(metrics, "conveyor_claim_duration_seconds_count") or 0.0,
                sample(metrics, "conveyor_claim_duration_seconds_sum") or 0.0,
            )
        )
    # one claim call per task, and one more that finds the queue empty
    assert seen[0][:2] == (3, 4)
    assert seen[1][:2] == (5, 7)
    assert 0 < seen[0][2] < seen[1][2]


def test_a_metrics_object_without_an_app_counts_no_enqueues(app: Conveyor) -> None:
    metrics = Metrics()
    app.enqueue("job")
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="default", task="job") is None


def test_the_app_tells_enqueue_callbacks_what_it_stored_until_unsubscribed(app: Conveyor) -> None:
    told: list[list[str]] = []
    unsubscribe = app.on_enqueue(lambda tasks: told.append([task.id for task in tasks]))
    app.enqueue("job", task_id="a")
    app.enqueue_many("job", [((1,), {}), ((1,), {}), ((2,), {})], unique_for=60)  # the second is a duplicate
    assert told[0] == ["a"]
    assert len(told[1]) == 2
    unsubscribe()
    app.enqueue("job")
    assert len(told) == 2


def test_a_raising_enqueue_callback_is_logged_and_never_fails_the_enqueue(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(tasks: object) -> None:
        raise RuntimeError("metrics down")

    app.on_enqueue(broken)
    metrics = Metrics(app)
    handle = app.enqueue("job")
    assert app.get(handle.id).state.value == "pending"
    assert sample(metrics, "conveyor_tasks_enqueued_total", queue="default", task="job") == 1
    assert "enqueue callback" in caplog.text
    with pytest.raises(TypeError):
        app.on_enqueue("not callable")  # type: ignore[arg-type]
