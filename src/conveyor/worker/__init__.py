"""The worker: ``Worker`` (steppable, or ``run()`` until shutdown), ``WorkerConfig``, ``Middleware``, and
``run_worker`` (the CLI's entry point). The runtime is composed of small services, one module each:
fetcher, pool, heartbeat, acker, promoter, reaper, janitor, registry; ``supervisor`` runs processes.

Five names for running a task, one role each:

- ``Worker`` (``worker.py``): what users hold, bound to an app: ``process_next()`` or ``run()``.
- ``Runtime`` (``runtime.py``): one ``run()``: composes, starts and stops the services of a process.
- ``Pool`` (``pool.py``): the threads and event loop that run claimed tasks, ``concurrency`` at once.
- ``Runner`` (``runner.py``): calls one job's handler with middleware and timeout, in the caller's thread.
- ``Executor`` (``executor.py``): decides: a claimed record → a ``Job``; a result or exception → ``Outcome``.
"""

from conveyor.worker.config import WorkerConfig
from conveyor.worker.entry import run_worker
from conveyor.worker.middleware import Middleware
from conveyor.worker.worker import Worker

__all__ = ["Middleware", "Worker", "WorkerConfig", "run_worker"]
