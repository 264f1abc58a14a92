"""``--processes N``: a supervisor that runs N worker child processes and replaces any that dies.

Children are ``python -m conveyor.worker <app> ...`` in their own session (a terminal's Ctrl-C reaches
only the supervisor, which forwards it once). A crashed child's tasks are recovered through their
leases, like any dead worker's (so stall accounting still archives a task that keeps killing its
process). Each child reports ``start``/``end`` of its tasks over a pipe (see ``child.py``: in batches,
and nothing about a task that ends within ``FLUSH_DELAY`` of its start); a child running a task past
its timeout (+ ``KILL_SLACK``) is killed, that task fails with ``TaskTimeout`` (retryable, per its
policy) and the other running tasks it had reported are released at once. A child that
reports a cancelled task (``cancel <id> <token>``: the broker archived it ``cancelled`` and revoked its lease)
and still runs it ``CANCEL_GRACE`` seconds later is told to stop (``child.STOP_SIGNAL``), then gets SIGKILL
``CANCEL_GRACE`` after that if the task still runs; it is replaced like any child that exits, but
for one an operator stopped (its last report is ``child.STOPPED``). The supervisor's first SIGTERM or
SIGINT stops every child gracefully, its second makes them exit now (``child.py`` says why by signals
of their own).
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from types import FrameType

from conveyor.errors import TaskTimeout
from conveyor.model import Outcome
from conveyor.worker.args import config_to_args
from conveyor.worker.child import EXIT_SIGNAL, STOP_SIGNAL, STOPPED
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executor import Executor
from conveyor.worker.loader import load_app
from conveyor.worker.runtime import install_signals, restore_signals, warn_of_unserved_queues

__all__ = ["CANCEL_GRACE", "KILL_SLACK", "Supervisor"]

log = logging.getLogger("conveyor.worker")

#: Seconds past a task's timeout before its process is killed (async handlers cancel themselves).
KILL_SLACK = 1.0
#: Seconds a cancelled task's handler has to return before its child gets SIGTERM, and then again
#: before SIGKILL: a sync handler cannot be interrupted inside its process, only with it.
CANCEL_GRACE = 2.0
_RESPAWN_PAUSE = 1.0  # a child that died within this many seconds of starting is restarted after it


@dataclass
class Child:
    slot: int
    proc: subprocess.Popen[bytes]
    reports: int
    started: float = field(default_factory=time.monotonic)
    buffer: bytes = b""
    running: dict[str, tuple[str, float | None]] = field(default_factory=dict)  # id → (token, deadline)
    cancelled: dict[str, float] = field(default_factory=dict)  # running id → when its child is told to stop
    kill_at: float | None = None  # told to stop for a cancel: SIGKILL then if a cancelled task still runs
    stopped: bool = False  # an operator stopped it (its last line said so): not replaced
    # (id, token) → when, of cancels reported before their task's start: the child's heartbeat and its
    # pool report from different threads. The token keeps one from matching a later claim of the same id.
    early_cancels: dict[tuple[str, str], float] = field(default_factory=dict)


class Supervisor:
    def __init__(self, app_ref: str, config: WorkerConfig) -> None:
        self.app_ref = app_ref
        self.app = load_app(app_ref)
        self.config = config
        self.executor = Executor(self.app, config)
        self.children: dict[int, Child] = {}
        self.selector = selectors.DefaultSelector()
        self._signals = 0
        self._respawn_at: dict[int, float] = {}

    def run(self) -> int:
        if len(self.config.middleware) > len(self.config.middleware_refs):
            log.warning("middleware objects given in code are not passed to child processes; use --middleware REF")
        warn_of_unserved_queues(self.app, self.config, f"supervisor {os.getpid()}")
        previous = install_signals(self._on_signal)
        try:
            for slot in range(self.config.processes):
                self._spawn(slot)
            while self.children or (self._signals == 0 and self._respawn_at):
                self._read(0.1)
                self._reap_children()
                self._kill_overdue()
                self._stop_cancelled()
        finally:
            restore_signals(previous)
            for child in list(self.children.values()):
                child.proc.kill()
                child.proc.wait()
        return 1 if self._signals >= 2 else 0  # a forced exit, as one worker's second signal makes it

    def _spawn(self, slot: int) -> None:
        read_fd, write_fd = os.pipe()
        child_config = replace(self.config, processes=0, middleware=())
        argv = [sys.executable, "-m", "conveyor.worker", self.app_ref, *config_to_args(child_config)]
        argv += ["--report-fd", str(write_fd), "--parent-pid", str(os.getpid())]
        argv += ["--log-level", logging.getLevelName(log.getEffectiveLevel())]  # the supervisor's own
        proc = subprocess.Popen(argv, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        child = Child(slot, proc, read_fd)
        self.children[slot] = child
        self.selector.register(read_fd, selectors.EVENT_READ, child)
        self._respawn_at.pop(slot, None)
        log.info("supervisor: started child %d (pid %d)", slot, proc.pid)
        if self._signals:  # a signal came after the loop decided to start it: it missed the order
            proc.send_signal(self._order())

    def _read(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            child: Child = key.data
            try:
                data = os.read(child.reports, 65536)
            except BlockingIOError:
                continue
            if not data:
                self.selector.unregister(child.reports)
                continue
            child.buffer += data
            *lines, child.buffer = child.buffer.split(b"\n")
            for line in lines:
                self._report(child, line.decode())

    def _report(self, child: Child, line: str) -> None:
        """One line of ``child.py``'s protocol; its times are the child's ``time.monotonic()`` readings
        (the system-wide clock: a report written late still sets the deadline of the task's real start)."""
        parts = line.split()
        if parts[:1] == ["start"] and len(parts) in (4, 5):
            started = float(parts[4]) if len(parts) == 5 else time.monotonic()
            deadline = None if parts[3] == "-" else started + float(parts[3]) + KILL_SLACK
            child.running[parts[1]] = (parts[2], deadline)
            cancelled_at = child.early_cancels.pop((parts[1], parts[2]), None)
            if cancelled_at is not None:
                child.cancelled[parts[1]] = cancelled_at + CANCEL_GRACE
        elif parts[:1] == ["cancel"] and len(parts) in (3, 4):
            at = float(parts[3]) if len(parts) == 4 else time.monotonic()
            running = child.running.get(parts[1])
            if running is None:
                child.early_cancels[(parts[1], parts[2])] = at
            elif running[0] == parts[2]:
                child.cancelled[parts[1]] = at + CANCEL_GRACE
        elif parts == [STOPPED]:
            child.stopped = True
        elif parts[:1] == ["end"] and len(parts) == 2:
            child.running.pop(parts[1], None)
            child.cancelled.pop(parts[1], None)

    def _reap_children(self) -> None:
        now = time.monotonic()
        for slot, child in list(self.children.items()):
            code = child.proc.poll()
            if code is None:
                continue
            self._forget(child)
            if self._signals:
                continue
            if child.stopped:
                log.warning("supervisor: child %d (pid %d) stopped by an operator; not replaced", slot, child.proc.pid)
                continue
            log.warning("supervisor: child %d (pid %d) exited with %s; replacing it", slot, child.proc.pid, code)
            quick = now - child.started < _RESPAWN_PAUSE
            self._respawn_at[slot] = now + (_RESPAWN_PAUSE if quick else 0.0)
        for slot, at in list(self._respawn_at.items()):
            if at <= now and self._signals == 0:
                self._spawn(slot)

    def _forget(self, child: Child) -> None:
        self._read(0)
        try:
            self.selector.unregister(child.reports)
        except (KeyError, ValueError):
            pass
        os.close(child.reports)
        del self.children[child.slot]

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            overdue = [tid for tid, (_, deadline) in child.running.items() if deadline is not None and now > deadline]
            if not overdue:
                continue
            log.warning("supervisor: child pid %d runs %s past its timeout; killing it", child.proc.pid, overdue)
            self._kill(child, set(overdue))

    def _stop_cancelled(self) -> None:
        """SIGTERM a child still running a cancelled task ``CANCEL_GRACE`` after it reported the cancel;
        SIGKILL it ``CANCEL_GRACE`` later if one still runs (a graceful shutdown waits for it in vain)."""
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.kill_at is not None:
                if now >= child.kill_at and child.cancelled:
                    log.warning(
                        "supervisor: child pid %d still runs cancelled %s; killing it",
                        child.proc.pid,
                        [*child.cancelled],
                    )
                    self._kill(child, set())
                continue
            late = [task_id for task_id, at in child.cancelled.items() if now >= at]
            if not late:
                continue
            log.warning("supervisor: child pid %d still runs cancelled %s; stopping it", child.proc.pid, late)
            child.kill_at = now + CANCEL_GRACE
            try:
                child.proc.send_signal(STOP_SIGNAL)
            except ProcessLookupError:
                pass

    def _kill(self, child: Child, overdue: set[str]) -> None:
        """SIGKILL ``child`` and settle what it held (it is replaced once reaped): ``overdue`` tasks fail,
        cancelled ones are left as the cancel archived them, the others are released."""
        child.proc.kill()
        child.proc.wait()
        self._read(0)
        running = {task_id: held for task_id, held in child.running.items() if task_id not in child.cancelled}
        child.cancelled.clear()
        self._settle_killed(running, overdue)

    def _settle_killed(self, running: dict[str, tuple[str, float | None]], overdue: set[str]) -> None:
        """Fail the overdue tasks with TaskTimeout; release the others the killed child held."""
        now = self.app.now()
        outcomes: list[Outcome] = []
        for task_id, (token, _) in running.items():
            if task_id not in overdue:
                outcomes.append(Outcome(task_id, token, "release"))
                continue
            record = self.app.broker.get(task_id, now)
            if record is None or record.lease_token != token:
                continue  # no longer ours: fenced
            job = self.executor.prepare(record)
            if isinstance(job, Outcome):
                outcomes.append(job)
            else:
                timeout = TaskTimeout(f"killed past its {job.options.timeout} s timeout")
                outcomes.append(self.executor.failed(job, timeout))
        if outcomes:
            applied = self.app.broker.settle(outcomes, now)
            for outcome, ok in zip(outcomes, applied, strict=True):
                log.info("supervisor: task %s %s (%s)", outcome.task_id, outcome.kind, "ok" if ok else "fenced")

    def _order(self) -> int:
        """What the children are told after the signals so far: stop gracefully, then exit now."""
        return STOP_SIGNAL if self._signals == 1 else EXIT_SIGNAL

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Order every child: the first signal is their graceful shutdown, the second exits now (by
        the children's own signals: each may have had SIGTERM from systemd as well, ``child.py``)."""
        self._signals += 1
        self._respawn_at.clear()
        order = self._order()
        for child in self.children.values():
            try:
                child.proc.send_signal(order)
            except ProcessLookupError:
                pass
