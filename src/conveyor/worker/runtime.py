"""``Runtime``: one ``Worker.run()``. It composes the services of one worker process and runs them
until shutdown (of the five names for running a task, see ``conveyor.worker``).

Start order (``run()``): with ``freeze_heap``, the heap is frozen first; then the acker (outcomes can
be written before anything runs), the registry (its first beat, at once: the preflight and the task
declarations), the promoter, reaper and janitor, the summary (when ``summary_interval`` is set), the
pool, the heartbeat and the cancel watcher, and last the fetcher, so nothing is claimed before
something can run it and keep its lease.

Shutdown (first SIGTERM/SIGINT or ``Worker.stop()``): the fetcher stops claiming; tasks buffered but
not started are released at once; running tasks get ``shutdown_grace`` seconds to finish; then every
lease still held is released back to pending in one ``settle`` (their handlers see
``ctx.lease_lost``; async ones are cancelled), the acker flushes, and the services stop in the
reverse order (so the summary's last line counts every outcome). A second signal releases what is
held and exits at once.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from conveyor.brokers.base import SettlesWithClaim
from conveyor.commands import QUIET, STOP
from conveyor.model import Outcome
from conveyor.worker.acker import Acker
from conveyor.worker.buffer import Buffer
from conveyor.worker.cancels import CancelWatcher
from conveyor.worker.config import DEFAULT_QUEUES
from conveyor.worker.events import log_event
from conveyor.worker.fetcher import Fetcher, QueueOrder
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.inflight import Held, Inflight
from conveyor.worker.pool import Pool, Reporter
from conveyor.worker.registry import Registry, new_worker_id
from conveyor.worker.runner import Runner
from conveyor.worker.service import Service
from conveyor.worker.summary import Summary
from conveyor.worker.upkeep import Janitor, Promoter, Reaper

if TYPE_CHECKING:
    from conveyor.host import Host
    from conveyor.worker.config import WorkerConfig
    from conveyor.worker.executor import Executor

__all__ = ["Runtime", "install_signals", "restore_signals", "warn_of_unserved_queues"]

#: Seconds between two looks of a running worker's main thread at the flag signal handlers set.
_SIGNAL_POLL = 0.05

log = logging.getLogger("conveyor.worker")

#: The longest an outcome waits for the fetcher's next claim to settle it (``SettlesWithClaim``).
SETTLE_LINGER = 0.01


class Runtime:
    """One worker process's services. ``run()`` blocks until ``request_stop()`` (or a signal)."""

    def __init__(
        self,
        app: Host,
        config: WorkerConfig,
        executor: Executor,
        reporter: Reporter | None = None,
        order: QueueOrder | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.worker_id = new_worker_id()
        self.inflight = Inflight()
        self.buffer = Buffer()
        linger = SETTLE_LINGER if isinstance(app.broker, SettlesWithClaim) else 0.0
        self.acker = Acker(app, self.inflight, linger=linger)
        runner = Runner(executor, config.middleware)
        self.supervised = reporter is not None  # a child of ``--processes N``: it reports to a supervisor
        self.stopped_by_operator = False  # an operator's ``stop`` ended it (a supervisor replaces it not)
        self.pool = Pool(runner, self.inflight, self.buffer, self.acker, config.concurrency, reporter)
        self.fetcher = Fetcher(app, config, self.inflight, self.buffer, order, self.acker)
        self.acker.claims_soon = self.fetcher.claims_soon
        self.heartbeat = Heartbeat(
            app.broker, app.clock, self.inflight, config.heartbeat_every, config.lease_for, reporter
        )
        self.cancels = CancelWatcher(app, self.inflight, self.heartbeat)
        self.registry = Registry(app, config, self.worker_id, self._running, self._counts, self._obey)
        self.maintenance: tuple[Service, ...] = (
            Promoter(app.broker, app.clock, config.promoter_interval),
            Reaper(app.broker, app.clock, config.reaper_interval),
            Janitor(app.broker, app.clock, config.janitor_interval),
        )
        if config.summary_interval:  # None or 0: no summary
            summary = Summary(
                self.worker_id, config.summary_interval, self.acker.counts, self._busy, config.concurrency
            )
            self.maintenance += (summary,)
        self._stop = threading.Event()
        self._signals = 0
        self._exiting: threading.Thread | None = None  # exit_now's thread, once started
        self._stop_signalled = False  # set by signal handlers, which must take no lock (see run())
        self.started = threading.Event()
        self.stopped = threading.Event()

    def _running(self) -> tuple[str, ...]:
        return tuple(h.id for h in self.inflight.snapshot() if h.started is not None)

    def _busy(self) -> int:
        return sum(1 for h in self.inflight.snapshot() if h.started is not None and not h.finished)

    def _counts(self) -> tuple[int, int]:
        return self.acker.processed, self.acker.failed

    def _obey(self, command: str) -> None:
        """An operator's command (``conveyor.commands``), from the registry's beat."""
        log.warning("worker %s: %s requested by an operator", self.worker_id, command)
        if command == QUIET:
            self.fetcher.stop()  # running and buffered tasks carry on; nothing new is claimed
        elif command == STOP:
            self.stopped_by_operator = True
            self.request_stop()

    def request_stop(self) -> None:
        """Begin a graceful shutdown (from any thread; a signal handler calls :meth:`stop_from_signal`)."""
        self._stop.set()

    def stop_from_signal(self) -> None:
        """Begin a graceful shutdown from a signal handler: a flag ``run()`` looks at, no lock taken. A
        handler that set an ``Event`` could run inside another handler's ``set()`` of it (a child gets
        systemd's SIGTERM and its supervisor's order at once) and wait for its own lock forever."""
        self._stop_signalled = True

    def run(self) -> int:
        """Run until asked to stop, then shut down gracefully; returns the exit code (0)."""
        log.info(
            "worker %s starting: queues=%s concurrency=%d",
            self.worker_id,
            ",".join(self.config.queues),
            self.config.concurrency,
        )
        if not self.supervised:  # a supervisor warns once for all its children
            warn_of_unserved_queues(self.app, self.config, f"worker {self.worker_id}")
        services: list[Service] = [self.registry, *self.maintenance, self.pool, self.heartbeat, self.cancels]
        if self.config.freeze_heap:
            _freeze_heap()
        self.acker.start()
        for service in services:
            service.start()
        self.fetcher.start()
        self.started.set()
        try:
            while not self._stop.wait(_SIGNAL_POLL) and not self._stop_signalled:
                pass
            self._stop.set()  # for whoever looks: the stop was asked by a signal
            self._shutdown()
        finally:
            for service in reversed(services):
                service.stop()
            if self.config.freeze_heap:
                gc.unfreeze()  # back in the oldest generation: collected as usual from now on
            self.stopped.set()
        exiting = self._exiting
        if exiting is not None:  # a forced exit under way: it ends the process (status 1), not this
            exiting.join()
        log.info("worker %s stopped", self.worker_id)
        return 0

    def _shutdown(self) -> None:
        log.info("worker %s: shutting down (grace %.1f s)", self.worker_id, self.config.shutdown_grace)
        self.fetcher.stop()
        self.release(self.pool.stop_dispatch(), "prefetched")
        deadline = time.monotonic() + self.config.shutdown_grace
        if not self.inflight.wait_empty(deadline):
            self.release(self.inflight.snapshot(), "grace period over")
        self.acker.stop()

    def release(self, helds: list[Held], why: str) -> None:
        """Give these tasks back to pending in one ``settle``; their handlers are told to stop."""
        helds = [h for h in helds if not h.lost]
        if not helds:
            return
        for held in helds:
            held.mark_lost()
        outcomes = [Outcome(h.id, h.token, "release") for h in helds]
        try:
            applied = self.app.broker.settle(outcomes, self.app.now())
        except Exception:
            log.exception("could not release %d task(s); their leases will expire", len(helds))
            return
        finally:
            self.inflight.remove(helds)
        released = 0
        for held, ok in zip(helds, applied, strict=True):
            if ok:
                released += 1
                log_event(held.record, "released", why=why.replace(" ", "-"))
        if released:
            log.info("worker %s: released %d task(s) back to pending (%s)", self.worker_id, released, why)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """First signal: graceful shutdown. Second: release everything held and exit now."""
        self._signals += 1
        if self._signals == 1:
            log.info("worker %s: got %s, stopping", self.worker_id, signal.Signals(signum).name)
            self.stop_from_signal()
            return
        log.warning("worker %s: second signal, exiting now", self.worker_id)
        self.exit_now()

    def exit_now(self) -> None:
        """Release every task held (for at most 2 s) and end the process with status 1, on a thread of
        its own: called from a signal handler, it must not hold up the main thread it interrupted,
        which may hold what the release needs (a write transaction on SQLite)."""
        if self._exiting is None:
            self._exiting = threading.Thread(target=self._exit_now, name="exit-now", daemon=True)
            self._exiting.start()

    def _exit_now(self) -> None:
        releaser = threading.Thread(target=self._release_all, daemon=True)
        releaser.start()
        releaser.join(timeout=2.0)
        os._exit(1)

    def _release_all(self) -> None:
        """Every task held released, claims stopped first: a fetcher still running (the graceful stop
        not begun yet) would claim a released task again, to leave it active when the process ends."""
        self.fetcher.stop()
        self.pool.stop_dispatch()
        self.release(self.inflight.snapshot(), "forced exit")


def _freeze_heap() -> None:
    """``WorkerConfig.freeze_heap``: collect once, then keep what is alive now out of every collection.

    A busy worker makes garbage-collector work: the objects of the tasks it holds (hundreds, each
    with its record, context and outcome) outlive the young collections and reach the oldest
    generation, and then a full collection traverses every object in the process. Frozen, the
    modules and the app are skipped (the larger the app's heap, the larger the saving;
    docs/performance-notes.md).
    """
    gc.collect()
    gc.freeze()


def install_signals(handler: signal.Handlers | object) -> dict[int, object]:
    """Route SIGTERM and SIGINT to ``handler``; returns the previous handlers (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, object] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handler)  # type: ignore[arg-type]
    return previous


def restore_signals(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]


#: Tasks a worker's warning of unserved queues names (an app may have hundreds).
_NAMED = 10


def warn_of_unserved_queues(app: Host, config: WorkerConfig, who: str) -> None:
    """A worker told no queues serves ``default`` alone, as Celery's and asynq's do: say so when the
    app's tasks name other queues, whose tasks it would leave waiting (``conveyor doctor`` lists
    such queues over every live worker)."""
    if config.queues != DEFAULT_QUEUES:
        return  # queues chosen: a fleet often splits them over its workers
    unserved = sorted((task.options.queue, name) for name, task in app.registry.items())
    unserved = [(queue, name) for queue, name in unserved if queue not in config.queues]
    if not unserved:
        return
    queues = sorted({queue for queue, _ in unserved})
    named = ", ".join(f"{name} ({queue})" for queue, name in unserved[:_NAMED])
    if len(unserved) > _NAMED:
        named += f" and {len(unserved) - _NAMED} more"
    log.warning(
        "%s serves queue %s only (no queues given), but the app's tasks %s go to %s: serve them with --queues %s",
        who,
        ",".join(config.queues),
        named,
        ", ".join(queues),
        ",".join([*config.queues, *queues]),
    )
