"""The worker: ``Worker`` (steppable), ``WorkerConfig``, and the executor that runs one task."""

from conveyor.worker.config import WorkerConfig
from conveyor.worker.worker import Worker

__all__ = ["Worker", "WorkerConfig"]
