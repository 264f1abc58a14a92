"""Prometheus metrics: per-task counters and durations fed by a worker middleware, and queue gauges
collected from the broker at scrape time. Everything lives in its own ``CollectorRegistry`` (never the
process-global one), so several apps and tests never collide.

Series (labels in braces)::

    conveyor_tasks_processed_total{queue,task}       executions that ended (any outcome but release)
    conveyor_tasks_failed_total{queue,task}          executions that raised (retried or archived)
    conveyor_tasks_retried_total{queue,task}         executions that ended in a retry
    conveyor_task_duration_seconds{queue,task}       histogram of execution time
    conveyor_queue_tasks{queue,state}                tasks per queue and state (at scrape time)
    conveyor_queue_paused{queue}                     1 if the queue is paused
    conveyor_queue_oldest_pending_age_seconds{queue} how long the oldest pending task has waited
    conveyor_workers                                 live workers (heartbeat not expired)
    conveyor_broker_up                               1 if the broker answered the scrape
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from conveyor.context import TaskContext
from conveyor.errors import ConveyorError
from conveyor.model import Outcome, TaskState
from conveyor.worker.middleware import Middleware

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from conveyor.app import Conveyor

__all__ = ["CONTENT_TYPE", "BrokerCollector", "Metrics", "MetricsMiddleware"]

log = logging.getLogger("conveyor.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Buckets from 5 ms to 10 min: task durations span far more than web requests.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class BrokerCollector(Collector):
    """Reads queue depth, paused flags, oldest-pending age and live workers from the broker per scrape."""

    def __init__(self, app: Conveyor) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("conveyor_broker_up", "1 if the broker answered this scrape")
        try:
            queues = self.app.inspect.queues()
            workers = self.app.inspect.workers()
            now = self.app.now()
        except (ConveyorError, OSError) as exc:
            log.warning("metrics scrape: broker unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily("conveyor_queue_tasks", "Tasks per queue and state", labels=["queue", "state"])
        paused = GaugeMetricFamily("conveyor_queue_paused", "1 if the queue is paused", labels=["queue"])
        age = GaugeMetricFamily(
            "conveyor_queue_oldest_pending_age_seconds", "Seconds the oldest pending task has waited", labels=["queue"]
        )
        for info in queues:
            for state in TaskState:
                depth.add_metric([info.name, state.value], info.counts.get(state.value, 0))
            paused.add_metric([info.name], 1 if info.settings.paused else 0)
            oldest = info.oldest_pending_at
            age.add_metric([info.name], max(0.0, now - oldest) if oldest is not None else 0.0)
        yield depth
        yield paused
        yield age
        count = GaugeMetricFamily("conveyor_workers", "Live workers (heartbeat not expired)")
        count.add_metric([], len(workers))
        yield count


class Metrics:
    """The metrics of one app in a private registry. ``app`` None: task counters only (no broker gauges).

    ``timer`` measures durations (default ``time.perf_counter``; tests pass a fake)."""

    def __init__(self, app: Conveyor | None = None, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.timer = timer
        labels = ["queue", "task"]
        self.processed = Counter("conveyor_tasks_processed", "Executions that ended", labels, registry=self.registry)
        self.failed = Counter("conveyor_tasks_failed", "Executions that raised", labels, registry=self.registry)
        self.retried = Counter(
            "conveyor_tasks_retried", "Executions that ended in a retry", labels, registry=self.registry
        )
        self.duration = Histogram(
            "conveyor_task_duration_seconds", "Execution time", labels, buckets=DURATION_BUCKETS, registry=self.registry
        )
        if app is not None:
            self.registry.register(BrokerCollector(app))

    def middleware(self) -> MetricsMiddleware:
        """A worker middleware feeding this object's counters and histogram."""
        return MetricsMiddleware(self)

    def render(self) -> bytes:
        """The Prometheus text exposition of everything in the registry."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> Callable[[], None]:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns a function that stops it."""
        from prometheus_client import start_http_server

        server, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop


class MetricsMiddleware(Middleware):
    """Counts executions by queue and task name and times them (see the module docstring)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._started: dict[int, float] = {}
        self._lock = threading.Lock()

    def before(self, ctx: TaskContext) -> None:
        with self._lock:
            self._started[id(ctx)] = self.metrics.timer()

    def on_error(self, ctx: TaskContext, exc: BaseException) -> None:
        self.metrics.failed.labels(ctx.queue, ctx.name).inc()

    def after(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self._lock:
            started = self._started.pop(id(ctx), None)
        if outcome.kind == "release":
            return
        labels = (ctx.queue, ctx.name)
        self.metrics.processed.labels(*labels).inc()
        if outcome.kind == "retry":
            self.metrics.retried.labels(*labels).inc()
        if started is not None:
            self.metrics.duration.labels(*labels).observe(max(0.0, self.metrics.timer() - started))
