"""The child side of ``--processes N``: report task starts and ends to the supervisor over a pipe,
and shut down gracefully if the supervisor dies.

Protocol (one line per event, each shorter than PIPE_BUF so writes from threads never interleave):
``start <task_id> <token> <timeout seconds or ->``, ``cancel <task_id> <token>`` (an operator cancelled it;
the supervisor stops this process if the task has not ended after ``CANCEL_GRACE``) and ``end <task_id>``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from conveyor.worker.inflight import Held

__all__ = ["PipeReporter", "watch_parent"]

log = logging.getLogger("conveyor.worker")


class PipeReporter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def _write(self, line: str) -> None:
        try:
            os.write(self.fd, (line + "\n").encode())
        except OSError:  # the supervisor is gone; the parent watch stops us
            pass

    def started(self, held: Held) -> None:
        timeout = held.job.options.timeout if held.job is not None else None
        self._write(f"start {held.id} {held.token} {'-' if timeout is None else repr(timeout)}")

    def cancelled(self, held: Held) -> None:
        self._write(f"cancel {held.id} {held.token}")

    def finished(self, held: Held) -> None:
        self._write(f"end {held.id}")


def watch_parent(parent_pid: int, stop: Callable[[], None], every: float = 0.5) -> threading.Thread:
    """Call ``stop()`` once this process's parent is no longer ``parent_pid`` (it died)."""

    def loop() -> None:
        while os.getppid() == parent_pid:
            threading.Event().wait(every)
        log.warning("supervisor %d is gone; shutting down", parent_pid)
        stop()

    thread = threading.Thread(target=loop, name="conveyor-parent-watch", daemon=True)
    thread.start()
    return thread
