"""Prometheus metrics: per-task counters and durations fed by a worker middleware, enqueues counted
by the app that makes them, and queue gauges collected from the broker at scrape time. Everything
lives in its own ``CollectorRegistry`` (never the process-global one), so several apps and tests
never collide.

Series (labels in braces)::

    conveyor_tasks_enqueued_total{queue,task}        tasks this process's app stored (duplicates not)
    conveyor_claim_duration_seconds                  histogram of one claim call to the broker
    conveyor_tasks_processed_total{queue,task}       executions that ended (any outcome but release)
    conveyor_tasks_failed_total{queue,task}          executions that failed (retried or archived failed or
                                                     permanent: raised, or returned what cannot be stored)
    conveyor_tasks_retried_total{queue,task}         executions that ended in a retry
    conveyor_task_duration_seconds{queue,task}       histogram of execution time
    conveyor_queue_tasks{queue,state}                tasks per queue and state (at scrape time)
    conveyor_queue_paused{queue}                     1 if the queue is paused
    conveyor_queue_oldest_pending_age_seconds{queue} how long the oldest pending task has waited
    conveyor_workers                                 live workers (heartbeat not expired)
    conveyor_broker_up                               1 if the broker answered the scrape

A claim takes a batch from several queues in one call, so its duration has no queue label (a
worker's scrape target tells workers apart); claims made behind a wait for work are not timed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from conveyor.context import TaskContext
from conveyor.errors import ConfigurationError, ConveyorError
from conveyor.model import ArchiveReason, NewTask, Outcome, TaskState
from conveyor.worker.middleware import Middleware

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from conveyor.app import Conveyor

__all__ = ["CONTENT_TYPE", "BrokerCollector", "Metrics", "MetricsMiddleware", "serve_registry"]

#: The archive reasons that end a failed execution (a cancel or a lost lease is no failure of the task's).
_FAILED = (ArchiveReason.FAILED, ArchiveReason.PERMANENT)

log = logging.getLogger("conveyor.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Buckets from 5 ms to 10 min: task durations span far more than web requests.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Buckets from 100 µs (a claim on a near Redis) to 10 s (a SQLite file contended up to its busy timeout).
CLAIM_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


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
    """The metrics of one app in a private registry. With an ``app``, it counts the enqueues that app
    makes from now on and reads the broker's gauges at scrape time; ``app`` None: the worker
    middleware's series only.

    ``timer`` measures task durations (default ``time.perf_counter``; tests pass a fake)."""

    def __init__(self, app: Conveyor | None = None, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.timer = timer
        labels = ["queue", "task"]
        self.processed = Counter("conveyor_tasks_processed", "Executions that ended", labels, registry=self.registry)
        self.failed = Counter("conveyor_tasks_failed", "Executions that failed", labels, registry=self.registry)
        self.retried = Counter(
            "conveyor_tasks_retried", "Executions that ended in a retry", labels, registry=self.registry
        )
        self.duration = Histogram(
            "conveyor_task_duration_seconds", "Execution time", labels, buckets=DURATION_BUCKETS, registry=self.registry
        )
        self.enqueued = Counter("conveyor_tasks_enqueued", "Tasks enqueued", labels, registry=self.registry)
        self.claim_duration = Histogram(
            "conveyor_claim_duration_seconds", "Time of one claim call", buckets=CLAIM_BUCKETS, registry=self.registry
        )
        # labels() checks and looks the label values up under a lock on every call: one child per
        # (queue, task) is kept here, so counting an enqueue is a dict lookup and an increment.
        self._enqueued: dict[tuple[str, str], Counter] = {}
        if app is not None:
            self.registry.register(BrokerCollector(app))
            app.on_enqueue(self.count_enqueued)

    def count_enqueued(self, tasks: Sequence[NewTask]) -> None:
        """Count ``tasks`` in ``conveyor_tasks_enqueued_total`` (what ``Metrics(app)`` hooks to the app)."""
        if len(tasks) == 1:
            task = tasks[0]
            self._enqueued_child(task.queue, task.name).inc()
            return
        for (queue, name), count in Tally((task.queue, task.name) for task in tasks).items():
            self._enqueued_child(queue, name).inc(count)

    def _enqueued_child(self, queue: str, name: str) -> Counter:
        child = self._enqueued.get((queue, name))
        if child is None:  # two threads may both get here: labels() hands both the same child
            child = self._enqueued[queue, name] = self.enqueued.labels(queue, name)
        return child

    def middleware(self) -> MetricsMiddleware:
        """A worker middleware feeding this object's counters and histogram."""
        return MetricsMiddleware(self)

    def render(self) -> bytes:
        """The Prometheus text exposition of everything in the registry."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> Callable[[], None]:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns a function that stops it."""
        return serve_registry(self.registry, port, host)


def serve_registry(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> Callable[[], None]:
    """Serve ``registry`` on ``/metrics`` in a daemon thread; returns a function that stops it.
    ConfigurationError (naming the address) when it cannot listen there."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:  # say which address: the OS error alone does not
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigurationError(f"cannot serve metrics on {where}: {(exc.strerror or str(exc)).lower()}") from None

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

    def on_claim(self, queues: Sequence[str], seconds: float, claimed: int) -> None:
        self.metrics.claim_duration.observe(seconds)

    def after(self, ctx: TaskContext, outcome: Outcome) -> None:
        with self._lock:
            started = self._started.pop(id(ctx), None)
        if outcome.kind == "release":
            return
        labels = (ctx.queue, ctx.name)
        self.metrics.processed.labels(*labels).inc()
        if outcome.kind == "retry":
            self.metrics.retried.labels(*labels).inc()
        # from the outcome, not from on_error: a result that cannot be stored fails the task too
        if outcome.kind == "retry" or (outcome.kind == "archive" and outcome.reason in _FAILED):
            self.metrics.failed.labels(*labels).inc()
        if started is not None:
            self.metrics.duration.labels(*labels).observe(max(0.0, self.metrics.timer() - started))
