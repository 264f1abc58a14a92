"""``wait_replicas=N``: every write script followed by ``WAIT N wait_timeout``, in the same round trip.

Redis replicates asynchronously: a master acknowledges a write before any replica has it, and a
replica promoted after the master dies lacks whatever had not reached it yet. With ``wait_replicas``
(a URL option, default 0: off) each ``FCALL`` of an operation that may write is sent with ``WAIT`` on
the same connection, in one write; ``WAIT`` answers how many replicas hold everything that connection
wrote, once N do or after ``wait_timeout`` milliseconds. On a Redis Cluster ``WAIT`` counts the
replicas of the master that ran the script: ``ClusterCalls`` sends both on one connection of that
master, and follows redirects and failovers itself (``cluster.py``); N is then per master.

What a shortfall does depends on who can act on it:

- **enqueue** raises ``ReplicationTimeout``. The tasks are on the master already, so the broker first
  takes back (``withdraw.lua``) those of the failed chunk that no worker has claimed yet; those a worker
  claimed meanwhile (``WAIT`` holds the producer for up to ``wait_timeout`` while workers can already
  see them) have started and are left alone. The error names both sets: enqueueing the withdrawn ids
  again is safe, the started ones have run or run now. Earlier chunks of the same call were confirmed
  and stay. The withdrawal is itself replicated after the enqueue, in order, so a replica that got the
  tasks late also gets their removal; if the master dies between the two, the failover decides.
- **every other write** (claim, settle, extend, the maintenance calls, operator actions) is logged
  (a warning at most once a minute, the rest at DEBUG) and returns normally. It is done on the
  master; a failover that loses it rolls the task back to an earlier state (a claim or a settle
  undone: the task runs again, which at-least-once delivery allows; an operator action undone: do it
  again). While fewer than N replicas are up, every write call takes ``wait_timeout`` longer.

Read-only operations and the withdrawal itself send no ``WAIT``. Writes outside the scripts (worker
registrations, pause flags, declarations) are not waited for either: they are re-written regularly
or by the operator.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from conveyor.brokers.base import Finding
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK
from conveyor.brokers.redis.faults import translate_errors
from conveyor.brokers.redis.scripts import ENQUEUES, READ_ONLY, is_missing_function
from conveyor.errors import BrokerError, ReplicationTimeout

if TYPE_CHECKING:
    from conveyor.brokers.redis.cluster import ClusterCalls
    from conveyor.brokers.redis.connections import Command, Connections
    from conveyor.brokers.redis.scripts import Scripts
    from conveyor.model import NewTask

__all__ = ["WARN_EVERY", "ReplicaWait", "Unreplicated"]

log = logging.getLogger("conveyor.brokers.redis.replication")

#: Seconds between two warnings about writes short of replicas (one broker object); others go to DEBUG.
WARN_EVERY = 60.0

#: Operations sent without ``WAIT``: they write nothing, or (``withdraw``) undo a write that already fell short.
_UNWAITED = READ_ONLY | {"withdraw"}


class Unreplicated(Exception):
    """An enqueue's ``FCALL`` succeeded on the master, but fewer replicas than wanted confirmed it."""

    def __init__(self, reply: Any, acknowledged: int) -> None:
        """``reply``: the call's reply as the server sent it (the broker replaces it with its results)."""
        super().__init__(f"{acknowledged} replica(s) confirmed")
        self.reply = reply
        self.acknowledged = acknowledged


class ReplicaWait:
    """``WAIT replicas timeout_ms`` after every write script of one broker object."""

    def __init__(self, replicas: int, timeout_ms: int) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self._wait: Command = ("WAIT", replicas, timeout_ms)
        self._quiet_until = 0.0  # no warning for a short write before this (monotonic) time

    def applies(self, name: str) -> bool:
        """True if operation ``name`` is followed by ``WAIT``."""
        return name not in _UNWAITED

    def call(
        self, scripts: Scripts, conns: Connections | ClusterCalls, client: redis.Redis, name: str, call: Command,
        before: Sequence[Command] = (),
    ) -> tuple[list[Any], Any]:  # fmt: skip
        """As ``Scripts.call``, with ``WAIT`` after ``call``: raises :class:`Unreplicated` for an enqueue
        that fell short, logs a warning for any other operation."""
        commands = [*before, call, self._wait]
        replies = conns.execute(commands)
        if is_missing_function(replies[-2]):
            scripts.load(client)
            replies = conns.execute(commands)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        acknowledged = int(replies[-1])
        if acknowledged < self.replicas:
            if name in ENQUEUES:
                raise Unreplicated(replies[-2], acknowledged)
            self._short(name, acknowledged)
        return replies[:-2], replies[-2]

    def _short(self, name: str, acknowledged: int) -> None:
        """Log a write short of replicas: a warning at most every :data:`WARN_EVERY` seconds (idle
        workers' claims would repeat it every poll while a replica is down), the rest at DEBUG."""
        now = time.monotonic()
        level = logging.DEBUG
        if now >= self._quiet_until:
            self._quiet_until, level = now + WARN_EVERY, logging.WARNING
        log.log(
            level,
            "%s was done on the Redis master but reached %d of %d replica(s) within %d ms "
            "(wait_replicas); a failover now could undo it",
            name,
            acknowledged,
            self.replicas,
            self.timeout_ms,
        )

    def findings(self, client: redis.Redis) -> list[Finding]:
        """``preflight``'s line on the replicas: are there at least ``replicas`` of them?

        Counted with ``WAIT replicas 1`` on a connection that wrote nothing (every connected replica
        has acknowledged that much), as ``WAIT`` is what ``NEEDED_ACL`` grants, ``INFO`` is not."""
        try:
            with translate_errors():
                connected = int(client.wait(self.replicas, 1))
        except BrokerError as exc:
            return [Finding("replicas", False, f"unreadable ({exc})")]
        if connected < self.replicas:
            detail = (
                f"{connected} connected, wait_replicas={self.replicas}: every enqueue fails with "
                "ReplicationTimeout until enough replicas are back"
            )
            return [Finding("replicas", False, detail, failing=True)]
        return [Finding("replicas", True, f"{connected} connected, wait_replicas={self.replicas}")]

    def enqueue(
        self,
        tasks: Sequence[NewTask],
        store: Callable[[Sequence[NewTask]], list[str | None]],
        withdraw: Callable[[list[str]], str],
        results: list[str | None],
    ) -> list[str | None]:
        """Enqueue ``tasks`` chunk by chunk (each confirmed before the next is sent): ``store(chunk)``
        runs one chunk's ``enqueue`` and returns, per task, None if stored, else the existing task's
        id (and raises :class:`Unreplicated` carrying that list), ``withdraw(ids)`` runs
        ``withdraw.lua``. Per task, as ``Broker.enqueue``, appended to ``results`` chunk by chunk (a
        refusal's ``stored`` is read from it) and returned."""
        for start in range(0, len(tasks), ENQUEUE_CHUNK):
            chunk = tasks[start : start + ENQUEUE_CHUNK]
            try:
                results += store(chunk)
            except Unreplicated as short:
                dups: list[str | None] = short.reply
                stored = [task.id for task, dup in zip(chunk, dups, strict=True) if dup is None]
                flags = withdraw(stored) if stored else ""
                sets: dict[str, list[str]] = {"1": [], "0": [], "2": []}
                for task_id, flag in zip(stored, flags, strict=True):
                    sets[flag].append(task_id)
                withdrawn, started, gone = (tuple(sets[flag]) for flag in "102")
                log.warning(
                    "an enqueue reached %d of %d replica(s) within %d ms: %d task(s) withdrawn, %d already"
                    " started, %d gone",
                    short.acknowledged,
                    self.replicas,
                    self.timeout_ms,
                    len(withdrawn),
                    len(started),
                    len(gone),
                )
                # the started ones stay stored and run: named with the chunks confirmed before
                raise ReplicationTimeout(
                    self.replicas, short.acknowledged, withdrawn, started, gone, stored=started
                ) from None
        return results
