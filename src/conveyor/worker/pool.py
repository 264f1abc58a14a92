"""``Pool``: the threads (and one event loop) that run buffered tasks, at most ``concurrency`` at once,
each through the ``Runner``.

Sync handlers run on ``concurrency`` daemon threads (daemon so that a handler stuck past shutdown
cannot keep the process alive once its lease is released); ``async def`` handlers run on one event
loop thread, so hundreds of them can wait on I/O together. Both count against the same slots.

Each executor thread takes a slot, then a task straight from the fetcher's ``Buffer``, and runs it
itself (or hands an async one to the loop): no dispatcher thread and no per-task hand-off queue, so a
stream of short tasks costs no thread switch per task (see ``buffer.py``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from conveyor.model import Outcome
from conveyor.worker.acker import Acker
from conveyor.worker.buffer import Buffer
from conveyor.worker.events import log_event
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.runner import Runner

__all__ = ["Pool", "Reporter"]

log = logging.getLogger("conveyor.worker")

#: Seconds the async handlers cancelled at a stop have to finish their cleanup (``finally`` blocks
#: that await, middleware's ``after``) on the loop before it is closed.
CLEANUP = 1.0


class Reporter(Protocol):
    """Told when a task starts, is cancelled and ends (the process supervisor listens through this)."""

    def started(self, held: Held) -> None: ...

    def cancelled(self, held: Held) -> None: ...

    def finished(self, held: Held) -> None: ...


class Slots:
    """``count`` slots, as tokens in a ``queue.SimpleQueue``: a ``threading.Semaphore`` is Python code
    around a ``Condition``, far dearer than this C queue (docs/performance-notes.md), and every task
    takes and gives back a slot."""

    def __init__(self, count: int) -> None:
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(count):
            self._tokens.put(None)

    def acquire(self, timeout: float) -> bool:
        """Take a slot, waiting at most ``timeout`` seconds; False if none came free."""
        try:
            self._tokens.get(timeout=timeout)
        except queue.Empty:
            return False
        return True

    def release(self) -> None:
        self._tokens.put(None)


class Pool:
    def __init__(
        self,
        runner: Runner,
        inflight: Inflight,
        buffer: Buffer,
        acker: Acker,
        concurrency: int,
        reporter: Reporter | None = None,
    ) -> None:
        self.runner = runner
        self.inflight = inflight
        self.buffer = buffer
        self.acker = acker
        self.concurrency = concurrency
        self.reporter = reporter
        self._slots = Slots(concurrency)
        self._threads: list[threading.Thread] = []
        self._loop = asyncio.new_event_loop()

    def start(self) -> None:
        targets: list[tuple[str, Callable[[], None]]] = [("conveyor-loop", self._run_loop)]
        targets += [(f"conveyor-exec-{i}", self._exec_loop) for i in range(self.concurrency)]
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop_dispatch(self) -> list[Held]:
        """Start nothing more; return the held tasks that were buffered but not started."""
        helds = [self.inflight.get(r.id) for r in self.buffer.close()]
        return [h for h in helds if h is not None and h.job is None]

    def stop(self) -> None:
        """Stop the threads that are idle and the loop (a sync handler still running is abandoned)."""
        self.buffer.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._threads[0].join(timeout=2.0)
        if not self._loop.is_running():
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                if not task.cancelling():  # one cancelled already is left to finish its cleanup
                    task.cancel()
            if tasks:  # their handlers' cleanup (a finally that awaits) and hooks run on the loop
                self._loop.run_until_complete(asyncio.wait(tasks, timeout=CLEANUP))
            self._loop.close()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _exec_loop(self) -> None:
        while True:
            while not self._slots.acquire(timeout=0.1):  # every slot is taken by async handlers
                if self.buffer.closed:
                    return
            record = self.buffer.get()
            if record is None:  # closed: shutting down
                self._slots.release()
                return
            held = self.inflight.get(record.id)
            if held is None or held.lost:
                self._slots.release()
                continue
            self._run(held)

    def _run(self, held: Held) -> None:
        """Run ``held`` in this thread (sync) or start it on the loop (async); this thread holds a slot."""
        try:
            prepared = self.runner.executor.prepare(held.record)
        except BaseException:  # a bug: drop the task here, its lease expires and the reaper recovers it
            log.exception("task %s: the runtime failed to prepare it", held.id)
            self._slots.release()
            self.inflight.remove([held])
            return
        if isinstance(prepared, Outcome):  # unknown name or undecodable payload: decided at once
            self._slots.release()
            self.inflight.finish(held)
            self.acker.submit(held, prepared)
            return
        if not self.inflight.start(held, prepared):  # its lease was lost meanwhile: it must not run
            self._slots.release()
            self.inflight.remove([held])
            return
        log_event(held.record, "started")
        if self.reporter is not None:
            self.reporter.started(held)
        outcome: Outcome | None = None
        try:
            if prepared.is_async:
                future = asyncio.run_coroutine_threadsafe(self.runner.run_async(prepared), self._loop)
                held.run_async(future)
                future.add_done_callback(lambda f: self._async_done(held, f))
                return
            outcome = self.runner.run_sync(prepared)
        except BaseException:  # a bug in middleware or the runtime: the lease recovers the task
            log.exception("task %s: the runtime failed to run it", held.id)
        self._finish(held, outcome)

    def _async_done(self, held: Held, future: Future[Any]) -> None:
        outcome: Outcome | None = None
        if future.cancelled():
            if not held.lost:  # a lost lease's cancel was logged where it was found (heartbeat.py)
                log_event(held.record, "cancelled")
        elif future.exception() is not None:
            log.error("task %s: the runtime failed to run it", held.id, exc_info=future.exception())
        else:
            outcome = future.result()
        self._finish(held, outcome)

    def _finish(self, held: Held, outcome: Outcome | None) -> None:
        self._slots.release()
        if self.reporter is not None:
            self.reporter.finished(held)
        if outcome is not None:
            self.inflight.finish(held)
            self.acker.submit(held, outcome)
        else:  # cancelled or broken: nothing will settle it here; its lease (if any is left) recovers it
            self.inflight.remove([held])
