"""The optional broker capabilities: what a backend may offer beyond the ``Broker`` protocol.

Each is a small runtime-checkable Protocol; a caller asks ``isinstance(broker, Capability)`` and does
without when the broker lacks it (never ``getattr``/``hasattr`` on a broker). ``conveyor.brokers.base``
re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from conveyor.clock import Clock
from conveyor.history import QueueMinute
from conveyor.model import BrokerPolicy, Outcome, TaskDeclaration, TaskRecord

__all__ = [
    "AnnouncesCancels",
    "AppliesPolicy",
    "ChecksServer",
    "ClaimsAfterWait",
    "CommandsWorkers",
    "DeclaresTasks",
    "Finding",
    "ForgetsQueues",
    "InterruptsWaits",
    "KeepsHistory",
    "LabelsIds",
    "SettlesWithClaim",
    "SharesClock",
    "WaitsForWork",
]


@runtime_checkable
class WaitsForWork(Protocol):
    """Optional capability: block an idle consumer until work may be there, instead of polling.

    The worker's fetcher uses it when its broker has it (``isinstance(broker, WaitsForWork)``) and
    sleeps ``poll_interval`` otherwise. Redis blocks on a notification key; SQLite sleeps on a FIFO
    per queue that a commit making a task claimable rings; memory on a condition its transitions
    notify. SQLite and memory also end the wait when a delayed task of the queues falls due.
    """

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until some call may have made tasks of ``queues`` pending.

        True is a hint, not a promise (another consumer may claim first; a broker may wake for any
        queue); False means the timeout passed. Delayed tasks becoming due need not wake anyone, so
        a caller still claims at least every ``timeout`` seconds.
        """
        ...


@runtime_checkable
class InterruptsWaits(Protocol):
    """Optional capability: end the waits for work in progress, so a stopping worker need not wait out
    its fetcher's (up to ``poll_interval``). Every built-in broker has it: memory rings its condition;
    Redis pushes a token to a list each wait's blocking pop also names; SQLite writes to a pipe each
    wait's ``select`` also watches (``conveyor.brokers.interrupts``).
    """

    def interrupt_waits(self) -> None:
        """End every ``wait_for_work`` in progress in this process, and the next one of each thread that
        claimed before this call; they return True (a hint: another consumer claims once for nothing)."""
        ...


@runtime_checkable
class AnnouncesCancels(Protocol):
    """Optional capability: announce each cancel of a running task as it happens, so the worker holding
    it stops the handler at once instead of at its next heartbeat (``extend`` finding the lease gone).

    Redis publishes the task's id on a channel of its own (only for cancels of active tasks: nothing
    else pays for it); memory calls its watchers in process. SQLite has no push between processes and
    does without: its workers learn at their next heartbeat. An announcement is a hint the worker
    confirms with the broker before acting on it.
    """

    def watch_cancels(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(task_id)`` (from a thread of the broker's) whenever ``cancel`` archives an
        active task, in any process sharing the store; returns a function that stops watching. A
        raising callback is logged and the watch goes on."""
        ...


@dataclass(frozen=True, slots=True)
class Finding:
    """One setting a broker's ``preflight`` looked at: its ``name`` (``maxmemory-policy``,
    ``journal_mode``), whether it is ``ok``, and ``detail``: the value found, or what is wrong and
    what to set instead. ``failing``: not only a risk but calls fail now (``doctor`` says FAIL)."""

    name: str
    ok: bool
    detail: str
    failing: bool = False


@runtime_checkable
class ChecksServer(Protocol):
    """Optional capability: check the server's (Redis) or file's (SQLite) settings that can lose tasks
    or refuse them: an evicting ``maxmemory-policy``, persistence off, a journal mode other than WAL.
    A worker calls it once as it starts and logs each finding that is not ok at WARNING; ``conveyor
    doctor`` shows every finding."""

    def preflight(self) -> list[Finding]:
        """One :class:`Finding` per setting looked at, in a stable order. Never raises for a server
        whose settings cannot be read: that is a finding too."""
        ...


@runtime_checkable
class ClaimsAfterWait(Protocol):
    """Optional capability: wait for work and claim it in one step (preferred over ``WaitsForWork``).

    An idle fetcher calls it in a loop: each call is one wait and one claim, so the claim needs no
    round trip of its own after the wake-up. Redis queues the claim behind its blocking pop.
    """

    def claim_after_wait(
        self, queues: Sequence[str], clock: Clock, lease_for: float, limit: int, timeout: float
    ) -> list[TaskRecord]:
        """Block up to ``timeout`` seconds until some call may have made tasks of ``queues`` pending,
        then ``claim(queues, now, lease_for, limit)`` with ``now`` read from ``clock`` when the claim
        runs. Returns the claimed tasks (empty when the timeout passed or another consumer won)."""
        ...


@runtime_checkable
class SettlesWithClaim(Protocol):
    """Optional capability: settle outcomes and claim in one call, where each call costs a commit.

    On SQLite every write transaction ends with a disk sync (``synchronous=FULL``); a busy worker's
    fetcher settles the outcomes finished since its last claim together with its next claim, so a
    batch of tasks costs one commit instead of two.
    """

    def settle_and_claim(
        self, outcomes: Sequence[Outcome], queues: Sequence[str], now: float, lease_for: float, limit: int
    ) -> tuple[list[bool], list[TaskRecord]]:
        """``settle(outcomes, now)`` then ``claim(queues, now, lease_for, limit)``, atomically: both or
        neither. Returns what each returned. An error of the settle (a ``ValueError`` for an unknown
        outcome kind) is raised as ``settle`` raises it, and no claim is made."""
        ...


@runtime_checkable
class CommandsWorkers(Protocol):
    """Optional capability: an operator's command to one worker (``conveyor.commands``), kept until the
    worker unregisters or ``ttl`` seconds pass; the worker's registry beat reads it."""

    def command_worker(self, worker_id: str, command: str, now: float, ttl: float) -> None:
        """Store ``command`` for ``worker_id`` (replacing an earlier one)."""
        ...

    def worker_command(self, worker_id: str, now: float) -> str | None:
        """The command stored for ``worker_id`` and not expired, else None (reading keeps it)."""
        ...


@runtime_checkable
class KeepsHistory(Protocol):
    """Optional capability: per-minute counts of settled executions, per queue (``conveyor.history``
    states the rule). ``settle`` updates them in its own atomic step; ``Inspector.history`` reads them."""

    def history(self, first: int, last: int) -> list[QueueMinute]:
        """The stored counters of minutes ``first..last`` (``floor(now / 60)``), every queue, in any
        order; a minute or queue with nothing settled may be absent."""
        ...


@runtime_checkable
class DeclaresTasks(Protocol):
    """Optional capability: keep the task declarations workers publish, so a process that enqueues a
    task by name without its handler (the CLI, a producer-only app) applies the queue, priority and
    expiry its worker registered (``conveyor.declared``). Every broker here has it.

    Declarations outlive the workers that made them ("a worker once served this name"); the latest
    one of a name wins. The broker stores them as given and never interprets them.
    """

    def declare_tasks(self, declarations: Sequence[TaskDeclaration]) -> None:
        """Store each declaration under its name, replacing an earlier one of that name."""
        ...

    def declared_tasks(self, names: Sequence[str] | None = None) -> dict[str, TaskDeclaration]:
        """The stored declarations of ``names`` (None: all), by name; names never declared are absent."""
        ...


@runtime_checkable
class ForgetsQueues(Protocol):
    """Optional capability: forget an empty queue (``conveyor queues delete``), so a queue made by a
    typo (a pause, a configure, a task since purged) does not stay listed forever. Every broker here
    has it."""

    def forget_queue(self, queue: str) -> int | None:
        """Forget ``queue``'s settings and its place in ``queues()`` if it holds no task in any state
        (retained completed and archived ones count). Returns 0 when forgotten, the number of tasks
        it holds when it holds some (nothing changed), None when no such queue is known."""
        ...


@runtime_checkable
class SharesClock(Protocol):
    """Optional capability: a clock every process sharing the store agrees on (Redis: the server's
    ``TIME``), so workers on hosts with skewed clocks agree on lease deadlines. The app uses it when
    no clock is injected."""

    def server_clock(self) -> Clock:
        """The broker's clock (the same object on every call)."""
        ...


@runtime_checkable
class LabelsIds(Protocol):
    """Optional capability: generated ids carry a suffix that names where their task is stored, so a
    call by id alone finds it without an index (Redis with queues in slots of their own:
    ``<id>~<label>``, docs/architecture.md). The app asks once, when it opens, and appends the
    suffix to every id it generates (a batch's from :meth:`batch_id_suffixes`, asked per batch);
    custom ids never carry one."""

    def id_suffixes(self) -> Callable[[str], str] | None:
        """The suffix of a generated id of a queue, by queue name; None when ids need none."""
        ...

    def batch_id_suffixes(self, count: int) -> Callable[[str], str] | None:
        """Like :meth:`id_suffixes`, for the ``count`` ids of one batch, asked for in the batch's
        order (``enqueue_many``): the broker may place a batch's tasks together. None when ids need
        none."""
        ...


@runtime_checkable
class AppliesPolicy(Protocol):
    """Optional capability: the :class:`~conveyor.model.BrokerPolicy` the broker was opened with
    (every broker here has it), so ``Conveyor.rebind`` opens the next broker with the same rules."""

    policy: BrokerPolicy
