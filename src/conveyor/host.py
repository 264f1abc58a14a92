"""``Host``: what the parts below the app use of it (the worker's services, ``Job``, ``Lease``,
``Inspector``), as a protocol ``Conveyor`` satisfies.

They are typed against this, not against ``Conveyor``, so none of them imports ``conveyor.app``: the
app imports its parts and every import points down (the layers are checked by ``lint-imports``). A
test can hand a part anything that has these few members instead of a whole app.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock
    from conveyor.declared import DeclaredTasks
    from conveyor.model import TaskInfo, TaskRecord
    from conveyor.task import Task

__all__ = ["Host"]


@runtime_checkable
class Host(Protocol):
    """The broker, the time, the registered handlers and the decoding of a stored record."""

    @property
    def broker(self) -> Broker: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def rng(self) -> random.Random:
        """The RNG for backoff jitter."""
        ...

    @property
    def registry(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def declared(self) -> DeclaredTasks: ...

    def now(self) -> float: ...

    def handler(self, name: str) -> Task[Any, Any] | None:
        """The registered task of that name, or None."""
        ...

    def wants_context(self, name: str) -> bool:
        """Whether the handler of ``name`` takes a ``TaskContext`` first."""
        ...

    def get(self, task_id: str) -> TaskInfo: ...

    def to_info(self, record: TaskRecord) -> TaskInfo: ...

    def rebind(self, url: str) -> None:
        """Move to the broker ``url`` names (``CONVEYOR_WORKER_URL``: the loader's override)."""
        ...

    def close(self) -> None:
        """Close the broker (whoever loaded the app closes it)."""
        ...
