"""Waking waiters of other processes at once: FIFOs beside the database file.

``<path>-wake-<queue digest>`` (``wake_suffix``), one per queue: a consumer waiting for work
(``SQLiteBroker.wait_for_work``) holds the FIFOs of its queues open for reading and sleeps in
``select`` on them (``wait_any``); a broker that has just committed a transaction that made a task
pending writes one byte to that task's queue's FIFO. One FIFO per queue, because a ring wakes one
waiter: on a FIFO shared by all queues it could wake a worker of another queue, which claims nothing
while the right one sleeps on. ``<path>-turn`` (``db.py``): a writer that found the
file locked by another connection sleeps on it, and every writer rings it as its transaction ends.
The writer opens it without blocking, so with no reader (nobody idle, or
no consumer yet) a ring costs one failed ``open`` and nothing waits; a full pipe (readers busy) just
drops the byte. The byte is a hint: the consumer still claims, and it still checks ``PRAGMA
data_version`` on a longer interval for writers that do not ring (older versions, other tools).

A ring wakes one waiter, not all: ``select`` reports the byte to every process sleeping on the FIFO,
but only the one that reads it returns; the others sleep on. So one task enqueued wakes one idle
worker, not every worker on the file to race for it (a claim that takes a full batch rings again,
for the next one: ``SQLiteBroker.claim``), and one commit lets one waiting writer try the lock.

**Turns.** A ring wakes a waiting writer, but the writer that rang is running and usually wants the
lock again first (a producer enqueueing back to back; on one core, always): the waiter wakes to find
the file locked again, and waits on. So a writer waiting for its turn also holds a shared ``flock`` on
the ``-turn`` FIFO (``queue_up`` / ``leave_queue``), and a writer about to start a transaction asks
``others_waiting`` (an exclusive ``flock`` that fails while any other process holds a shared one) and
lets them go first. The kernel drops a dead process's ``flock``, so a killed waiter holds no one up.

Where FIFOs do not exist (Windows) or the path is taken by something that is not a FIFO, both
sides turn themselves off and the consumer falls back to polling ``data_version`` alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import select
import stat
import threading
import time

__all__ = ["Doorbell", "wait_any", "wake_suffix"]

log = logging.getLogger("conveyor.brokers.sqlite")

#: After finding no consumer, a producer tries again this much later (seconds), not at every commit.
_QUIET = 0.01


def wake_suffix(queue: str) -> str:
    """The suffix of ``queue``'s wake-up FIFO: a digest, as a queue name may hold any character."""
    return "-wake-" + hashlib.blake2b(queue.encode(), digest_size=8).hexdigest()


def wait_any(bells: list[Doorbell], timeout: float, halt: int | None = None) -> bool:
    """Sleep up to ``timeout`` s or until a ring of any of ``bells`` this waiter takes, or ``halt`` (a
    file descriptor: an interrupt's pipe, ``halts.py``) is readable; True if rung or halted. False at
    once when no bell is usable and there is no ``halt``."""
    fds = {fd: bell for bell in bells if (fd := bell._reading()) is not None}
    if not fds and halt is None:
        return False
    watched = [*fds] if halt is None else [*fds, halt]
    deadline = time.monotonic() + max(timeout, 0.0)
    try:
        while True:
            ready, _, _ = select.select(watched, [], [], max(deadline - time.monotonic(), 0.0))
            if not ready:
                return False
            if halt in ready:
                return True  # (a ring ready too stays for another waiter)
            taken = [fds[fd].take(fd) for fd in ready]  # every one: one wake-up covers them all
            if True in taken:
                return True
            if None in taken:
                return False  # end of file: cannot happen while a waiter holds a write end
    except (OSError, ValueError):  # closed by close() meanwhile: the caller checks its data_version
        return False


class Doorbell:
    """The FIFO of one database file: ``ring`` after a commit, ``wait`` while idle. Thread-safe."""

    def __init__(self, db_path: str, suffix: str) -> None:
        self.path = f"{db_path}{suffix}"
        self._mode = 0o600
        with contextlib.suppress(OSError):
            self._mode = os.stat(db_path).st_mode & 0o666  # whoever may write the database may ring
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._reader: int | None = None
        self._writer: int | None = None
        self._holder: int | None = None  # a write end the reader keeps: without any, it reads end-of-file
        self.usable = hasattr(os, "mkfifo")
        self._quiet_until = 0.0  # no reader was there: no new attempt before then (monotonic)
        self.listening_since: float | None = None  # when this process began to take rings (monotonic)

    def ring(self) -> None:
        """Wake the consumers waiting on this file, if any (never blocks, never raises)."""
        if not self.usable or (self._writer is None and time.monotonic() < self._quiet_until):
            return  # (no lock for the common case: nobody listened a moment ago)
        with self._lock:
            self._forget_inherited()
            fd = self._writer
            if fd is None:
                if time.monotonic() < self._quiet_until:
                    return
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:  # ENXIO: no reader (no consumer); ENOENT: no consumer ever waited
                    # a consumer that starts listening meanwhile still sees the commit by its data_version check
                    self._quiet_until = time.monotonic() + _QUIET
                    return
                if not self._is_fifo(fd):
                    return
                self._writer = fd
            try:
                os.write(fd, b"\0")
            except BlockingIOError:  # full: plenty of wake-ups are pending already
                pass
            except OSError:  # EPIPE: every reader went away; open again next time
                self._writer = None
                os.close(fd)

    def listen(self) -> bool:
        """Start receiving rings (before checking for work, so none between the check and ``wait`` is lost)."""
        return self._reading() is not None

    def heard_since(self, moment: float) -> bool:
        """Whether every ring of a commit after ``moment`` (``time.monotonic()``) reached this reader, so
        a waiter need not look for such commits itself: it was listening by then, and a writer that
        found no reader before that has since tried again (it waits ``_QUIET`` s between tries)."""
        since = self.listening_since
        return since is not None and since + _QUIET <= moment

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s or until a ring this waiter takes; True if rung. False at once when
        not usable."""
        return wait_any([self], timeout)

    def take(self, fd: int) -> bool | None:
        """Read the rings pending on ``fd`` (this bell's reader, reported readable): True if it got any,
        False if another waiter took them first, None at end of file."""
        try:
            if not os.read(fd, 4096):
                return None
        except BlockingIOError:  # another waiter took the ring: sleep on
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(fd, 4096):  # every pending ring: one wake-up covers them all
                pass
        return True

    def queue_up(self) -> None:
        """Mark this process as waiting for its turn (until :meth:`leave_queue`); best effort."""
        fd = self._reading()
        if fd is not None:
            with contextlib.suppress(OSError):  # another process checking at this instant: not marked
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)

    def leave_queue(self) -> None:
        with self._lock:
            if self._reader is not None and self._pid == os.getpid():
                with contextlib.suppress(OSError):
                    fcntl.flock(self._reader, fcntl.LOCK_UN)

    def others_waiting(self) -> bool:
        """Whether another process waits for its turn (:meth:`queue_up`). Never blocks; False when no
        ring of this process found a reader yet (then nobody waits)."""
        with self._lock:
            self._forget_inherited()
            fd = self._writer
            if fd is None:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                return False
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False

    def close(self) -> None:
        with self._lock:
            self._forget_inherited()
            self._close_all()

    def _reading(self) -> int | None:
        with self._lock:
            self._forget_inherited()
            if self._reader is not None or not self.usable:
                return self._reader
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkfifo(self.path, self._mode)
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                log.debug("cannot use %s for wake-ups (%s); polling instead", self.path, exc)
                self.usable = False
                return None
            if not self._is_fifo(fd):
                return None
            # select() reports a FIFO with no writer left readable (end of file) until one opens it again
            self._holder = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._reader = fd
            self.listening_since = time.monotonic()
            return fd

    def _close_all(self) -> None:
        for fd in (self._reader, self._writer, self._holder):
            if fd is not None:
                os.close(fd)
        self._reader = self._writer = self._holder = None
        self.listening_since = None

    def _is_fifo(self, fd: int) -> bool:
        """Keep ``fd`` only if it is a FIFO: never write into, or spin on, a file that happens to be there."""
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            return True
        os.close(fd)
        log.debug("%s is not a FIFO; polling for wake-ups instead", self.path)
        self.usable = False
        return False

    def _forget_inherited(self) -> None:
        """After a fork, the child opens its own ends (an inherited reader would share its wake-ups)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._close_all()  # the child's copies only
