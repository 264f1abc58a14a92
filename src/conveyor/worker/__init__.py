"""The worker: ``Worker`` (steppable, or ``run()`` until shutdown), ``WorkerConfig``, ``Middleware``, and
``run_worker`` (the CLI's entry point). The runtime is composed of small services, one module each:
fetcher, pool, heartbeat, acker, promoter, reaper, janitor, registry; ``supervisor`` runs processes."""

from conveyor.worker.config import WorkerConfig
from conveyor.worker.entry import run_worker
from conveyor.worker.middleware import Middleware
from conveyor.worker.worker import Worker

__all__ = ["Middleware", "Worker", "WorkerConfig", "run_worker"]
