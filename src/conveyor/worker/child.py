"""The child side of ``--processes N``: report task starts and ends to the supervisor over a pipe,
and shut down gracefully if the supervisor dies.

Protocol (one line per event): ``start <task_id> <token> <timeout seconds or -> <started>``, ``cancel
<task_id> <token> <at>`` (an operator cancelled it; the supervisor stops this process if the task has
not ended ``CANCEL_GRACE`` after ``at``) and ``end <task_id>``. ``started`` and ``at`` are
``time.monotonic()`` readings of this process: the system-wide monotonic clock the supervisor reads
too, so a report that arrives late still sets the right deadline.

Reports are not written as they happen: a pool thread writing its own line for every start and
end released the GIL for a system call and woke the supervisor twice per task, which halved the
drain of short tasks (docs/architecture.md, "Several processes on one file"). The pool threads only
note which tasks run (two dict operations a task); one thread compares that with what it last wrote,
at most :data:`FLUSH_DELAY` after a start, and writes the differences together. A task that starts
and ends between two looks is never reported at all (the supervisor only acts on tasks that run past
a timeout or a cancel, each at least a second away). A child killed meanwhile takes its last unsent
starts with it: the supervisor then recovers those tasks through their leases, as it does the tasks
the child had claimed and not started.

The supervisor's orders come as signals of their own, :data:`STOP_SIGNAL` (shut down gracefully) and
:data:`EXIT_SIGNAL` (exit now), not as the SIGTERM a child takes from anyone else: under systemd's
default ``KillMode=control-group`` every process of the unit gets SIGTERM, and a child that also took
the supervisor's forwarded SIGTERM as a second signal exited at once, its running tasks released
mid-flight instead of given their grace. A child an operator stopped (``conveyor.commands.STOP``)
writes ``stopped`` as its last line before it exits, and the supervisor does not replace it (an exit
status would say it as well, were it not also what an app's ``sys.exit()`` may choose).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from conveyor.worker.inflight import Held

__all__ = [
    "EXIT_SIGNAL",
    "FLUSH_DELAY",
    "STOPPED",
    "STOP_SIGNAL",
    "PipeReporter",
    "obey_supervisor",
    "watch_parent",
]

log = logging.getLogger("conveyor.worker")

#: Longest time (seconds) a report waits in the child before it is written to the supervisor.
FLUSH_DELAY = 0.02

#: The supervisor's "shut down gracefully" (idempotent: a second one never forces an exit).
STOP_SIGNAL = signal.SIGUSR1
#: The supervisor's "exit now" (its own second signal): release what is held and exit.
EXIT_SIGNAL = signal.SIGUSR2
#: A child's last line after an operator's ``stop``: the supervisor lets it be.
STOPPED = "stopped"


def obey_supervisor(stop: Callable[[], None], exit_now: Callable[[], None]) -> None:
    """Route :data:`STOP_SIGNAL` to ``stop`` and :data:`EXIT_SIGNAL` to ``exit_now`` (main thread)."""

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop()

    def on_exit(signum: int, frame: FrameType | None) -> None:
        exit_now()

    signal.signal(STOP_SIGNAL, on_stop)
    signal.signal(EXIT_SIGNAL, on_exit)


def _start(held: Held) -> str:
    """The protocol's ``start`` line (module docstring) of a running task."""
    timeout = held.job.options.timeout if held.job is not None else None
    at = held.started if held.started is not None else time.monotonic()
    return f"start {held.id} {held.token} {'-' if timeout is None else repr(timeout)} {at!r}\n"


class PipeReporter:
    """Reports for the supervisor, written together by one thread (``start``s it), at most
    :data:`FLUSH_DELAY` after the start that called for them."""

    def __init__(self, fd: int, delay: float = FLUSH_DELAY) -> None:
        self.fd = fd
        self.delay = delay
        # running tasks, by their Held (identity: a task claimed again is another Held of the same id);
        # one dict store and one pop a task, atomic under the GIL, so the pool threads take no lock
        self._running: dict[Held, None] = {}
        self._sent: dict[Held, None] = {}  # those whose start was written, and no end yet
        self._cancels: list[tuple[Held, float]] = []  # reported cancels not written yet (rare)
        self._waited: set[tuple[Held, float]] = set()  # those kept from the last look (``_flush``)
        self._lock = threading.Lock()  # one flush at a time; guards ``_cancels``
        self._pending = threading.Event()  # something may have started since the last look
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
        self._running[held] = None
        if not self._pending.is_set():
            self._pending.set()

    def cancelled(self, held: Held) -> None:
        with self._lock:
            self._cancels.append((held, time.monotonic()))
        if not self._pending.is_set():
            self._pending.set()

    def finished(self, held: Held) -> None:
        self._running.pop(held, None)
        if held in self._sent and not self._pending.is_set():  # its start was written: its end must be
            self._pending.set()

    def _run(self) -> None:
        while not self._closed:
            self._pending.wait()
            if self._closed:
                return
            time.sleep(self.delay)  # let starts gather; a task ending meanwhile is never reported
            self._pending.clear()  # before the look: a start or an end after it sets it again
            if self._flush():
                self._pending.set()

    def _flush(self) -> bool:
        """Write the ends, starts and cancels since the last flush; True if it must look again: a cancel
        waits for its start, or a task whose start it wrote has ended already (its ``finished`` may
        have looked at the ``_sent`` before this one)."""
        with self._lock:
            running = self._running.copy()  # one C call: atomic against the pool threads' stores
            sent = self._sent
            lines = [f"end {held.id}\n" for held in sent if held not in running]
            lines += [_start(held) for held in running if held not in sent]
            # A cancel goes with its task's start. One whose task is not running is dropped if it ended
            # (nothing is left to stop), or kept for the next look once: its pool thread may be between
            # ``Inflight.start`` and ``started``.
            kept: list[tuple[Held, float]] = []
            for held, at in self._cancels:
                if held in running:
                    lines.append(f"cancel {held.id} {held.token} {at!r}\n")
                elif held not in sent and (held, at) not in self._waited:
                    kept.append((held, at))
            self._cancels, self._waited = kept, set(kept)
            self._sent = running
            if lines:
                data = "".join(lines).encode()
                try:
                    while data:  # one writer at a time, so lines never interleave; a signal may cut one short
                        data = data[os.write(self.fd, data) :]
                except OSError:  # the supervisor is gone; the parent watch stops us
                    pass
        return bool(kept) or any(held not in self._running for held in running)


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
