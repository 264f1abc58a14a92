"""``run_worker``: the CLI's entry point, one worker in this process or a supervisor of several.

It sits above the runtime and the supervisor (it picks one of them) and is the one place in the
worker that loads an app by reference, so neither of them imports the other.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import NoReturn

from conveyor.errors import ConfigurationError
from conveyor.host import Host
from conveyor.worker.config import WorkerConfig
from conveyor.worker.loader import load_app
from conveyor.worker.supervisor import Supervisor
from conveyor.worker.worker import Worker

__all__ = ["exit_process", "run_worker"]

log = logging.getLogger("conveyor.worker")


def exit_process(code: int | str | None) -> NoReturn:
    """End this process with ``code`` (``SystemExit``'s). A thread a handler started without marking it
    daemon would hold Python's exit once the worker stopped ("stopped" logged, the process alive
    until a second signal or SIGKILL): such threads are named in a WARNING and not waited for."""
    lingering = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not lingering:
        sys.exit(code)
    log.warning(
        "%d thread(s) started by tasks still run (%s): exiting without waiting for them",
        len(lingering),
        ", ".join(sorted(lingering)),
    )
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def run_worker(app: Host | str, config: WorkerConfig | None = None) -> int:
    """Run a worker until SIGTERM/SIGINT; the entry point for the CLI. Returns the exit code.

    ``app`` is a ``Conveyor`` or an import reference ``"pkg.module:app"``. With ``config.processes >=
    1`` a supervisor runs that many child processes (then ``app`` must be a reference, which the
    children import).
    """
    config = config or WorkerConfig()
    if config.processes >= 1:
        if not isinstance(app, str):
            raise ConfigurationError("processes >= 1 needs the app as an import reference 'pkg.module:app'")
        return Supervisor(app, config).run()
    application = load_app(app) if isinstance(app, str) else app
    return Worker(application, config).run()
