"""``python -m conveyor.worker pkg.module:app [--concurrency N] [--processes N] [--queues a=3,b=1] ...``"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from conveyor.worker.args import config_from_args, parse


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse(argv)
    logging.basicConfig(
        level=ns.log_level.upper(), format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )
    config = config_from_args(ns)
    if ns.report_fd is None:
        from conveyor.worker.entry import run_worker

        return run_worker(ns.app, config)
    from conveyor.worker.child import STOPPED, PipeReporter, obey_supervisor, watch_parent
    from conveyor.worker.loader import load_app
    from conveyor.worker.worker import Worker

    # Signal handlers take no lock (``Runtime.stop_from_signal`` says why): an order while the app
    # loads is noted in a list and kept for the worker (SIGUSR1's default action would kill it).
    early: list[bool] = []
    obey_supervisor(lambda: early.append(True), lambda: os._exit(1))
    worker = Worker(load_app(ns.app), config)
    if ns.parent_pid is not None:
        watch_parent(ns.parent_pid, worker.stop)

    def exit_now() -> None:
        runtime = worker.runtime
        if runtime is None:
            os._exit(1)
        runtime.exit_now()

    obey_supervisor(worker.stop_from_signal, exit_now)
    if early:
        worker.stop_from_signal()
    reporter = PipeReporter(ns.report_fd)
    reporter.start()
    try:
        code = worker.run(reporter=reporter)
    finally:
        reporter.close()
    if worker.runtime is not None and worker.runtime.stopped_by_operator:
        os.write(ns.report_fd, f"{STOPPED}\n".encode())  # the supervisor does not replace this one
    return code


if __name__ == "__main__":
    from conveyor.worker.entry import exit_process

    exit_process(main())
