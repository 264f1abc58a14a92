"""The child side of ``--processes N``: report task starts and ends to the supervisor over a pipe,
and shut down gracefully if the supervisor dies.

Protocol (one line per event): ``start <task_id> <token> <timeout seconds or -> <started>``, ``cancel
<task_id> <token> <at>`` (an operator cancelled it; the supervisor stops this process if the task has
not ended ``CANCEL_GRACE`` after ``at``) and ``end <task_id>``. ``started`` and ``at`` are
``time.monotonic()`` readings of this process: the system-wide monotonic clock the supervisor reads
too, so a report that arrives late still sets the right deadline.

Reports are not written one by one: a pool thread writing its own line for every start and end
released the GIL for a system call and woke the supervisor twice per task, which halved the drain of
short tasks (docs/architecture.md, "Several processes on one file"). They wait here for at most
:data:`FLUSH_DELAY` and one thread writes them together; a task that starts and ends within that
wait is never reported at all (the supervisor only acts on tasks that run past a timeout or a cancel,
each at least a second away). A child killed meanwhile takes its last unsent starts with it: the
supervisor then recovers those tasks through their leases, as it does the tasks the child had
claimed and not started.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from conveyor.worker.inflight import Held

__all__ = ["FLUSH_DELAY", "PipeReporter", "watch_parent"]

log = logging.getLogger("conveyor.worker")

#: Longest time (seconds) a report waits in the child before it is written to the supervisor.
FLUSH_DELAY = 0.02


#: A report before it is written: kind, task id, lease token, timeout (a start's), monotonic time.
_Line = tuple[str, str, str, float | None, float]


def _text(line: _Line) -> str:
    """The protocol's line (module docstring) of a report."""
    kind, task_id, token, timeout, at = line
    if kind == "start":
        return f"start {task_id} {token} {'-' if timeout is None else repr(timeout)} {at!r}\n"
    if kind == "cancel":
        return f"cancel {task_id} {token} {at!r}\n"
    return f"end {task_id}\n"


class PipeReporter:
    """Reports for the supervisor, written together by one thread (``start``s it), at most
    :data:`FLUSH_DELAY` after the first of them."""

    def __init__(self, fd: int, delay: float = FLUSH_DELAY) -> None:
        self.fd = fd
        self.delay = delay
        self._lock = threading.Lock()
        self._lines: dict[int, _Line] = {}  # unsent, in order (by sequence number)
        self._next = 0
        self._by_task: dict[str, list[int]] = {}  # task id → its unsent start and cancel lines
        self._started: set[str] = set()  # ids whose start line is unsent
        self._pending = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="conveyor-reports", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is left and stop the writing thread."""
        self._closed = True
        self._pending.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._flush()

    def started(self, held: Held) -> None:
        timeout = held.job.options.timeout if held.job is not None else None
        at = held.started if held.started is not None else time.monotonic()
        self._add(held.id, ("start", held.id, held.token, timeout, at))

    def cancelled(self, held: Held) -> None:
        self._add(held.id, ("cancel", held.id, held.token, None, time.monotonic()))

    def finished(self, held: Held) -> None:
        with self._lock:
            if held.id in self._started:  # its start never left: nothing about this run needs to
                self._started.discard(held.id)
                for seq in self._by_task.pop(held.id):
                    del self._lines[seq]
                return
        self._add(held.id, ("end", held.id, "", None, 0.0))

    def _add(self, task_id: str, line: _Line) -> None:
        # Kept as a tuple, written as text at the flush: most starts never are (their task ends first).
        kind = line[0]
        with self._lock:
            seq = self._next
            self._next += 1
            self._lines[seq] = line
            if kind != "end":
                self._by_task.setdefault(task_id, []).append(seq)
            if kind == "start":
                self._started.add(task_id)
        if not self._pending.is_set():  # a flush clears it under the lock, after taking the lines
            self._pending.set()

    def _run(self) -> None:
        while not self._closed:
            self._pending.wait()
            if self._closed:
                return
            time.sleep(self.delay)  # let reports gather; a task ending meanwhile cancels its start
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            self._pending.clear()
            lines = list(self._lines.values())
            self._lines.clear()
            self._by_task.clear()
            self._started.clear()
        data = "".join(map(_text, lines)).encode()
        try:
            while data:  # one thread writes, so lines never interleave; a signal may cut a write short
                data = data[os.write(self.fd, data) :]
        except OSError:  # the supervisor is gone; the parent watch stops us
            pass


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
