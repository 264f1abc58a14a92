"""Prometheus metrics: counters and durations from the worker middleware, queue gauges from the broker."""

from __future__ import annotations

from prometheus_client import REGISTRY

from conveyor import Conveyor, Retry
from conveyor.metrics import Metrics
from conveyor.model import WorkerInfo


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
    app = Conveyor("memory://")
    metrics = Metrics(app)
    app.close()

    def broken() -> list[object]:
        from conveyor.errors import BrokerUnavailable

        raise BrokerUnavailable("gone")

    app.inspect.queues = broken  # type: ignore[method-assign,assignment]
    assert sample(metrics, "conveyor_broker_up") == 0
    assert b"conveyor_broker_up 0.0" in metrics.render()


def test_metrics_use_a_private_registry(app: Conveyor) -> None:
    Metrics(app)
    Metrics(app)  # a second one does not clash
    assert REGISTRY.get_sample_value("conveyor_workers") is None
