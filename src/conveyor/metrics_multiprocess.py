"""Metrics of ``conveyor worker -p N --metrics-port P``: the children count, the supervisor serves.

Each child process counts its tasks with prometheus-client's multiprocess mode: its counters and
histograms live in files under one directory (``PROMETHEUS_MULTIPROC_DIR``, made by the supervisor and
inherited by every child), and the supervisor's endpoint serves their sum, with the counts of children
that died and were replaced still in it. The broker-wide series (queue depths, paused flags, oldest
pending age, live workers) come from the supervisor alone, read from the broker at scrape time, so a
sum over the children cannot count a queue N times.

The children load :data:`middleware` by reference (``--middleware conveyor.metrics_multiprocess:middleware``):
importing this module in a child is what creates its counters, in that child's files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, multiprocess

from conveyor.errors import ConfigurationError
from conveyor.metrics import BrokerCollector, Metrics, serve_registry

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["DIR_ENV", "MIDDLEWARE_REF", "serve_children"]

#: The variable prometheus-client reads, at import, to count in files instead of in memory.
DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: How the children load their metrics middleware (``WorkerConfig.middleware_refs``).
MIDDLEWARE_REF = "conveyor.metrics_multiprocess:middleware"


def __getattr__(name: str) -> Any:
    # Built on first access, in the child that loads it: its counters must be made after
    # DIR_ENV is set, which it is from the child's start.
    if name == "middleware":
        if not os.environ.get(DIR_ENV):
            raise ConfigurationError(f"{MIDDLEWARE_REF} counts for a supervisor: {DIR_ENV} is not set")
        value = globals()["middleware"] = Metrics().middleware()
        return value
    raise AttributeError(name)


def serve_children(app: Conveyor, port: int, host: str) -> Callable[[], None]:
    """Make the counting directory (inherited by children started from now on), serve the children's
    summed counters and the broker's gauges on ``host:port``; returns a function that stops serving
    and removes the directory."""
    directory = tempfile.mkdtemp(prefix="conveyor-metrics-")
    previous = os.environ.get(DIR_ENV)
    os.environ[DIR_ENV] = directory
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    registry.register(BrokerCollector(app))
    try:
        stop_serving = serve_registry(registry, port, host)
    except BaseException:
        _restore(previous)
        shutil.rmtree(directory, ignore_errors=True)
        raise

    def stop() -> None:
        stop_serving()
        _restore(previous)
        shutil.rmtree(directory, ignore_errors=True)

    return stop


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(DIR_ENV, None)
    else:
        os.environ[DIR_ENV] = previous
