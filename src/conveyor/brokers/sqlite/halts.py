"""``InterruptsWaits`` on SQLite: a pipe per idle wait in progress, watched by its ``select`` beside the
wake-up FIFOs (``wake.py``), so a stopping worker's fetcher returns at once, not at its timeout.

A wait takes a pipe from the broker's :class:`Pipes` (made at first need, kept for the next waits),
empties it, and registers it (``conveyor.brokers.interrupts``); an interrupt writes a byte to each pipe
registered. Waits in one process only: another process's broker has pipes of its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

__all__ = ["Pipe", "Pipes"]


@dataclass(frozen=True, slots=True, eq=False)  # by identity: fds are numbers the system reuses
class Pipe:
    """One wait's pipe: it selects on ``read``, an interrupt writes to ``write``."""

    read: int
    write: int


class Pipes:
    """The pipes of one broker's waits. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[Pipe] = []
        self._open: set[Pipe] = set()
        self._closing = False  # close() came while some were in use: each is closed when given back
        self._pid = os.getpid()

    def take(self) -> Pipe:
        """A pipe for a wait, emptied (a byte written after its last wait ended wakes no one)."""
        with self._lock:
            self._forget_inherited()
            if self._free:
                pipe = self._free.pop()
            else:
                read, write = os.pipe()
                os.set_blocking(read, False)
                os.set_blocking(write, False)
                pipe = Pipe(read, write)
                self._open.add(pipe)
        with contextlib.suppress(BlockingIOError):
            while os.read(pipe.read, 512):
                pass
        return pipe

    def give(self, pipe: Pipe) -> None:
        with self._lock:
            if pipe not in self._open:
                return  # (made before a fork: closed already)
            if self._closing:
                self._open.discard(pipe)
                _close(pipe)
                self._closing = bool(self._open)
            else:
                self._free.append(pipe)

    def fire(self, pipe: Pipe) -> None:
        """Wake the wait selecting on ``pipe`` (never blocks, never raises; nothing once closed)."""
        with self._lock:
            if pipe in self._open:
                with contextlib.suppress(OSError):  # full: a byte is there already
                    os.write(pipe.write, b"\0")

    def close(self) -> None:
        """Close every pipe, those of waits in progress as they end (later waits make new ones)."""
        with self._lock:
            for pipe in self._free:
                self._open.discard(pipe)
                _close(pipe)
            self._free.clear()
            self._closing = bool(self._open)

    def _forget_inherited(self) -> None:
        """After a fork, the child makes its own (a parent's interrupt must not wake the child's waits)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            for pipe in self._open:  # the child's copies only
                _close(pipe)
            self._open.clear()
            self._free.clear()
            self._closing = False


def _close(pipe: Pipe) -> None:
    os.close(pipe.read)
    os.close(pipe.write)
