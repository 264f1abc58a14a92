"""Task declarations: what workers publish about the tasks they serve, and a producer's view of them.

A worker publishes one :class:`~conveyor.model.TaskDeclaration` per registered handler as it starts
(``worker/registry.py``). A process that enqueues a name it has no handler for (``conveyor enqueue``,
a producer-only app) looks the declaration up, so the task lands in the queue its worker serves, with
its priority and expiry. Lookups are cached for :data:`CACHE_SECONDS`, so enqueueing by name costs a
broker round trip per name at most that often. Brokers store declarations as JSON
(``conveyor.brokers.declarations``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from conveyor.brokers.base import DeclaresTasks
from conveyor.model import TaskDeclaration

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.task import Task

__all__ = ["CACHE_SECONDS", "DeclaredTasks", "declarations_of"]

#: How long a producer trusts a lookup (a found declaration or its absence) before asking again.
CACHE_SECONDS = 10.0


def declarations_of(registry: Mapping[str, Task[Any, Any]], now: float) -> list[TaskDeclaration]:
    """The declarations of every handler in an app's registry. An absolute ``expires`` (a datetime)
    is not published: it means one instant, not a rule for every enqueue."""
    out = []
    for name, task in sorted(registry.items()):
        o = task.options
        expires = None if o.expires is None or isinstance(o.expires, datetime) else float(o.expires)
        timeout = None if o.timeout is None else float(o.timeout)
        unique_for = None if o.unique_for is None else float(o.unique_for)
        out.append(
            TaskDeclaration(
                name, o.queue, o.priority, expires, o.max_retries, timeout, float(o.retention), now, unique_for
            )
        )
    return out


class DeclaredTasks:
    """A producer's cached view of the declarations in its broker (thread-safe)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker if isinstance(broker, DeclaresTasks) else None
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[TaskDeclaration | None, float]] = {}

    @property
    def supported(self) -> bool:
        return self._broker is not None

    def get(self, name: str) -> TaskDeclaration | None:
        """The declaration of ``name``, or None when no worker ever declared it."""
        if self._broker is None:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(name)
        if cached is not None and cached[1] > now:
            return cached[0]
        found = self._broker.declared_tasks([name]).get(name)
        with self._lock:
            self._cache[name] = (found, now + CACHE_SECONDS)
        return found

    def all(self) -> dict[str, TaskDeclaration]:
        """Every stored declaration (uncached: for operators)."""
        return {} if self._broker is None else self._broker.declared_tasks()

    def publish(self, declarations: Iterable[TaskDeclaration]) -> None:
        items = list(declarations)
        if self._broker is not None and items:
            self._broker.declare_tasks(items)
            with self._lock:
                for item in items:
                    self._cache.pop(item.name, None)
