"""``redis://``: the Broker contract on Redis 7+ / Valkey, every transition one atomic Lua script.

The semantics are those of ``memory://`` (see ``conveyor.brokers.base``); the layout is in ``keys.py``
(layout 5: a slot per queue, unless the broker is given layout 4's ``Keys``). Every script call is
addressed by queue: it works in the slot of the queue (or the task id) it is about, and declares
that slot's key (an enqueue's custom ids and unique keys are claimed in the namespace slot by a call
of their own first, ``claims.py``; in layout 4 the enqueue declares the namespace slot instead, the
same slot there). A call that spans queues (a claim over several queues, an enqueue of tasks of
several queues, a settle of their outcomes) is one call per slot on a cluster; on one server claim,
promote, reap and stats join the slots into one call (``RedisCalls._joined``). The maintenance and
reading calls over every queue read the queue registry and visit each slot.
Round trips: ``enqueue`` one per queue slot and chunk of :data:`ENQUEUE_CHUNK` tasks (each chunk
atomic: on ``QueueFull`` earlier chunks of the call stay written; ``producing.py``), ``claim`` one for
any ``limit`` on one server (due tasks are promoted and expired leases reaped inside it, at most
:data:`MAINTENANCE_BUDGET` of each per call), ``settle`` one per slot and chunk of
:data:`SETTLE_CHUNK` outcomes, reads one each.
A call larger than one chunk sends its chunks one after another on one connection, each encoded while
the server runs the one before (``Connections.execute_each``). Faults become ``conveyor.errors`` as
``faults.py`` describes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis

from conveyor.brokers.base import EventCallback, Finding
from conveyor.brokers.redis import admin, preflight, upkeep, waits
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK, SETTLE_CHUNK, settle_args
from conveyor.brokers.redis.codec import decode_claimed, split_due
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.connections import Command
from conveyor.brokers.redis.faults import Refused, translate_errors
from conveyor.brokers.redis.producing import Producing
from conveyor.brokers.redis.scripts import Arg
from conveyor.brokers.redis.serverclock import ServerClock
from conveyor.brokers.redis.spread import upkeep_first
from conveyor.brokers.transitions import refusal
from conveyor.clock import Clock
from conveyor.errors import InvalidTransition, TaskNotFound
from conveyor.history import QueueMinute
from conveyor.model import (
    BrokerPolicy,
    LeaseStatus,
    Outcome,
    QueueInfo,
    QueueSettings,
    TaskDeclaration,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = ["ENQUEUE_CHUNK", "MAINTENANCE_BUDGET", "SETTLE_CHUNK", "RedisBroker"]

#: Due tasks promoted and expired leases reaped (each) inside one claim or reap call, at most.
MAINTENANCE_BUDGET = 1000


class RedisBroker(Producing):
    """A broker shared by any number of processes and hosts through one Redis-compatible server."""

    @classmethod
    def from_url(cls, url: str, policy: BrokerPolicy) -> RedisBroker:
        return cls(RedisConfig.from_url(url), policy)

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, queues: Sequence[str], now: float, lease_for: float, limit: int = 1) -> list[TaskRecord]:
        return self._claim(queues, repr(float(now)), lease_for, limit)

    def _claim(
        self, queues: Sequence[str], now: str, lease_for: float, limit: int, before: Sequence[Command] = ()
    ) -> list[TaskRecord]:
        self._halts.claimed()
        if self.keys.one_slot:
            claimed, due, ran_at = self._claim_in(self.keys.prefix, queues, now, lease_for, limit, before)
        else:
            claimed, due, ran_at = [], None, 0.0
            runs: list[tuple[str, Sequence[str]]] = list(self._runs(queues))
            old = self._old()
            if old:  # layout 4's tasks not moved yet, after layout 5's (upgrade.py)
                runs.append((old, queues))
            calls = self._joined(runs)
            budget = upkeep_first(runs, MAINTENANCE_BUDGET) if len(calls) < len(runs) else MAINTENANCE_BUDGET
            for prefix, run in calls:  # in the queues' order, until `limit`
                if len(claimed) >= limit:
                    break
                left = limit - len(claimed)
                records, first, at = self._claim_in(prefix, run, now, lease_for, left, before, budget)
                if len(calls) == len(runs):  # a call per slot (not joined): what it found is that slot's
                    self._claimed_in(prefix, len(records) < left)
                claimed += records
                if first is not None and (due is None or first - at < due - ran_at):
                    due, ran_at = first, at
                before = ()
        if len(claimed) < limit:  # a full claim leaves the noted due time alone: it read none
            self._dues.claimed(due, ran_at, None if now == "" else self._clock or time.time)
        return claimed

    def _claim_in(
        self,
        prefix: str,
        queues: Sequence[Arg],
        now: str,
        lease_for: float,
        limit: int,
        before: Sequence[Command],
        budget: Arg = MAINTENANCE_BUDGET,
    ) -> tuple[list[TaskRecord], float | None, float]:
        """The tasks claimed in slot ``prefix``, and, if fewer than ``limit``, when its first scheduled
        or retry task falls due (None: none), and the ``now`` the claim ran at. ``budget``: claim.lua's
        A(4), which names the slots of a joined call whose upkeep comes first (``upkeep_first``)."""
        base = secrets.token_hex(12)
        lease_for = float(lease_for)
        args: tuple[Arg, ...] = (repr(lease_for), limit, base, budget, *queues)
        _, reply, ran_at = self._invoke("claim", prefix, now, args, before)
        reply, due = split_due(reply)
        return decode_claimed(reply, ran_at, lease_for, base), due, ran_at  # rows, then one string (claim.lua)

    def claim_after_wait(
        self, queues: Sequence[str], clock: Clock, lease_for: float, limit: int, timeout: float
    ) -> list[TaskRecord]:
        """``ClaimsAfterWait``: wait up to ``timeout`` for a wake-up (see :meth:`wait_for_work`), then claim.

        When ``clock`` is this broker's :meth:`server_clock` (the app's default), the blocking pop and
        the claim go in one write on one connection: the server runs the claim the moment the pop
        returns, at its own TIME, with no round trip in between (an idle worker starts a new task one
        round trip sooner). With any other clock (a ``FakeClock`` in tests) it waits, then claims at
        ``clock()``: the claim must see the caller's time. Either way the wait ends at the latest when
        the first scheduled or retry task of the queues' slots falls due, as the last claim read it
        (``dues.py``): the claim then promotes and takes it.
        """
        return waits.claim_after_wait(self, self._claim, queues, clock, lease_for, limit, timeout)

    def interrupt_waits(self) -> None:
        """``InterruptsWaits``: end the idle waits in progress in this process (a worker stopping) at
        once, and the next of each thread that claimed before; one push per wait (``waits.py``)."""
        waits.interrupt(self)

    def settle(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        keys = self.keys
        if keys.one_slot:
            return self._settle(keys.prefix, outcomes, now)
        return self._by_task_slot(
            [outcome.task_id for outcome in outcomes],
            lambda prefix, places: self._settle(prefix, [outcomes[i] for i in places], now),
        )

    def _settle(self, prefix: str, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        applied: list[bool] = []
        for start in range(0, len(outcomes), SETTLE_CHUNK):
            chunk = outcomes[start : start + SETTLE_CHUNK]
            reply = self._call("settle", prefix, now, *settle_args(chunk))  # "1"/"0" per outcome
            applied.extend(flag == "1" for flag in reply)
        return applied

    def extend(self, task_id: str, token: str, now: float, lease_for: float) -> LeaseStatus | None:
        prefix = self._task_prefix(task_id)
        reply = self._call("extend", prefix, now, task_id, token, repr(float(lease_for)))
        if not reply and self._upgrade is not None:  # by-id calls during the move (addressing._elsewhere)
            [again] = self._elsewhere([task_id], [prefix])
            if again is not None:
                reply = self._call("extend", again, now, task_id, token, repr(float(lease_for)))
        if not reply:
            return None
        return LeaseStatus(float(reply[0]), reply[1] == "1")

    # -- maintenance ---------------------------------------------------------------------------

    def promote(self, now: float, limit: int = 1000) -> int:
        slots = self._slots()
        if self.joins_slots or len(slots) < 2:  # one call: the Lua spends the limit (spend() in _upkeep.lua)
            moved = 0
            for prefix, more in self._joined([(prefix, ()) for prefix in slots]):
                moved += int(self._call("promote", prefix, now, max(0, limit - moved), *more))
        else:
            moved = upkeep.promote_slots(self._client, slots, now, limit, self._call_at(now))
        self._drop_retired()
        return moved

    def reap(self, now: float, limit: int = 1000) -> int:
        slots = self._slots()
        if not self.joins_slots and len(slots) > 1:
            return upkeep.reap_slots(self._client, slots, now, limit, self._call_at(now), MAINTENANCE_BUDGET)
        done = 0
        for prefix, more in self._joined([(prefix, ()) for prefix in slots]):
            done += int(self._call("reap", prefix, now, max(0, limit - done), MAINTENANCE_BUDGET, *more))
        return done

    def clean(self, now: float, limit: int = 1000) -> int:
        """The janitor's call: besides, on layout 5's keys, it moves layout 4's tasks (``upgrade.py``)."""
        if self._upgrade is not None:
            with translate_errors():
                self._upgrade.step(now)
        groups = self._slot_groups(self._registered())
        cap = self.policy.max_archived
        if len(groups) > 1:
            return upkeep.clean_slots(self._client, groups, now, limit, cap, self._clean_in)
        return sum(self._clean_in(prefix, now, limit, "kc", group) for prefix, group in groups)

    def _call_at(self, now: float) -> upkeep.Call:
        return lambda name, prefix, *args: self._call(name, prefix, now, *args)

    def _clean_in(self, prefix: str, now: float, limit: int, passes: str, queues: Sequence[str]) -> int:
        return int(self._call("clean", prefix, now, limit, self.policy.max_archived, passes, *queues))

    # -- reading -------------------------------------------------------------------------------

    def get(self, task_id: str, now: float) -> TaskRecord | None:
        """One round trip (``get.lua``) where the id names its slot (a generated id, layout 4) or the
        server is one (the script reads a custom id's entry, then the task); on a cluster a custom id
        reads its entry first, in the namespace slot."""
        keys = self.keys
        if keys.one_slot or "~" in task_id:
            record = self._read(keys.task_prefix(task_id), task_id, now)
        elif self.joins_slots:
            old = self._upgrade.prefix if self._upgrade is not None else ""
            record = self._read(keys.namespace_prefix, task_id, now, old)
        else:
            prefix = self._task_prefix(task_id)
            record = self._read(prefix, task_id, now)
            if record is None and prefix == self._old():  # the move may have taken it meanwhile
                record = self._read(self._task_prefix(task_id), task_id, now)
        if record is None or (record.keep_until is not None and now >= record.keep_until):
            return None
        return record

    def _read(self, prefix: str, task_id: str, now: float, *old: str) -> TaskRecord | None:
        """The task ``task_id`` as stored in slot ``prefix`` (with ``old``: found by its entry, get.lua)."""
        item = self._call("get", prefix, now, task_id, *old)  # "" (none), the row alone, or the whole item
        if isinstance(item, str):
            if not item:
                return None
            item = [item, None, None, [], None, None]
        records = self._records([item])
        return records[0] if records else None

    def list_tasks(
        self, queue: str, state: TaskState, now: float, offset: int = 0, limit: int = 100
    ) -> list[TaskRecord]:
        state = TaskState(state)
        return self._records(self._list(queue, state.value, now, max(0, offset), max(0, limit)))

    def queues(self, now: float) -> list[QueueInfo]:
        queues = self._registered()
        rows: list[Any] = []
        groups = self._slot_groups(queues)
        old = self._old()
        if old:  # layout 4's queues too, their counts added by _queue_infos (upgrade.py)
            with translate_errors():
                groups.append((old, sorted(cast("set[str]", self._client.smembers(old + "queues")))))
        for prefix, args in self._joined(groups):
            rows += self._call("stats", prefix, now, *args)
        return self._queue_infos(rows)

    # -- queue settings ------------------------------------------------------------------------

    def configure_queue(self, settings: QueueSettings) -> None:
        """Settings in the queue slot, then the registry (namespace slot): a crash between leaves
        settings of a queue not listed yet, which the next ``configure`` or enqueue lists, and a
        ``forget_queue`` between its steps sees the settings and keeps the queue listed."""

        def text(value: float | None) -> str:
            return "" if value is None else repr(value)

        def configure(prefix: str, part: QueueSettings) -> None:
            limits = (text(part.max_size), text(part.concurrency), text(part.aging))
            self._call("configure", prefix, 0.0, part.name, *limits)

        self._configure_spread(settings, configure)  # each partition's share (spread.py)
        old = self._old()
        if old is not None:  # its tasks still in layout 4 are claimed there, by that slot's settings
            configure(old, settings)
        self._register(settings.name)

    def set_paused(self, queue: str, paused: bool) -> None:
        prefixes = self._queue_prefixes(queue)
        old = self._old()
        if old is not None:  # layout 4's tasks of the queue are claimed by that slot's flag until moved
            prefixes = [*prefixes, old]
        if len(prefixes) > 1:  # every partition, then the registry
            self._write_pause(queue, prefixes, paused)
        admin.set_paused(self._client, self.keys, queue, paused)

    def forget_queue(self, queue: str) -> int | None:
        """Three steps (docs/architecture.md, "Redis Cluster: keys per queue"): mark the queue
        forgotten in its slot unless it holds tasks, take it out of the registry, then take the mark
        away, listing the queue again if an enqueue or a ``configure`` brought it back meanwhile (an
        enqueue that sees the mark registers the queue on every call until it is gone)."""
        if len(self._queue_prefixes(queue)) > 1:
            return self._forget_spread(queue, self._restore)
        spread = self._spreads(fresh=True).get(queue)  # layout 4 keeps a count and limits there
        marked = self._forget_mark(queue)
        if marked is None or isinstance(marked, int):
            return marked
        self._unregister(queue)
        self._forget_spread_entry(spread)
        self._forget_finish(queue, marked)
        return 0

    def _restore(self, settings: QueueSettings) -> None:
        self.configure_queue(settings)
        self.set_paused(settings.name, settings.paused)

    # -- admin ---------------------------------------------------------------------------------

    def _admin(self, name: str, task_id: str, now: float) -> Any:
        """Operator action ``name`` (``transitions.ADMIN_SOURCES``): its script checks the source state."""
        try:
            return self._call(name, self._task_prefix(task_id), now, task_id)
        except Refused as exc:
            if exc.text.startswith("CONVEYOR_NOTFOUND"):
                raise TaskNotFound(task_id) from None
            raise refusal(name, exc.text.partition(" ")[2], task_id) from None

    def run_now(self, task_id: str, now: float) -> None:
        self._admin("run_now", task_id, now)

    def archive(self, task_id: str, now: float) -> None:
        self._admin("archive", task_id, now)

    def cancel(self, task_id: str, now: float) -> TaskState:
        return TaskState(self._admin("cancel", task_id, now))

    def delete(self, task_id: str, now: float) -> None:
        self._admin("delete", task_id, now)

    def purge(self, queue: str, state: TaskState, now: float, limit: int | None = None) -> int:
        state = TaskState(state)
        if state is TaskState.ACTIVE:
            raise InvalidTransition("cannot purge active tasks; cancel them first")
        return self._purge(queue, state.value, now, -1 if limit is None else max(0, limit))

    # -- workers and events ----------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo, now: float, ttl: float) -> None:
        admin.register_worker(self._client, self.keys, info, now, ttl)

    def unregister_worker(self, worker_id: str) -> None:
        admin.unregister_worker(self._client, self.keys, worker_id)

    def command_worker(self, worker_id: str, command: str, now: float, ttl: float) -> None:
        admin.command_worker(self._client, self.keys, worker_id, command, now, ttl)

    def worker_command(self, worker_id: str, now: float) -> str | None:
        return admin.worker_command(self._client, self.keys, worker_id, now)

    def history(self, first: int, last: int) -> list[QueueMinute]:
        return admin.history(self._client, [self.keys.slot(prefix) for prefix in self._slots()], first, last)

    def declare_tasks(self, declarations: Sequence[TaskDeclaration]) -> None:
        admin.declare_tasks(self._client, self.keys, declarations)

    def declared_tasks(self, names: Sequence[str] | None = None) -> dict[str, TaskDeclaration]:
        return admin.declared_tasks(self._client, self.keys, names)

    def workers(self, now: float) -> list[WorkerInfo]:
        return admin.workers(self._client, self.keys, now)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        return self._events.subscribe(callback)

    def watch_cancels(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """``AnnouncesCancels``: ``callback(task_id)`` for every running task cancelled in the namespace."""
        return self._cancels.watch(callback)

    def close(self) -> None:
        self._cancels.close()
        self._events.close()
        link, self._link = self._link, None
        if link is not None:
            link.close(self._plain)
        self._plain.close()

    # -- Redis specifics -----------------------------------------------------------------------

    def id_suffixes(self) -> Callable[[str], str] | None:
        """``LabelsIds``: where each queue has a slot of its own, a generated id ends in ``~<label>``
        (``keys.queue_label``), which by-id calls route by; in layout 4 ids need nothing."""
        return None if self.keys.one_slot else self._id_suffix

    def batch_id_suffixes(self, count: int) -> Callable[[str], str] | None:
        """``LabelsIds``: the suffixes of a batch of ``count`` generated ids, asked for in order; a
        partitioned queue's batch goes to as few partitions as its chunks need (``spread.py``)."""
        return None if self.keys.one_slot else self._batch_suffixes(count)

    def server_clock(self) -> ServerClock:
        """A clock agreeing with the server's TIME (see ``serverclock.py``); one per broker object."""
        if self._clock is None:
            self._clock = ServerClock(self._time_client, self.config.clock_refresh)
        return self._clock

    def _time_client(self) -> redis.Redis:
        """Whom the clock asks: any node's TIME will do, so the chosen client (a cluster's moves off
        a seed that went down), or before the first call has chosen one, the URL's first node."""
        link = self._link
        return self._plain if link is None else link.client

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """``WaitsForWork``: block up to ``timeout`` seconds until some call made tasks pending.

        For idle workers: wake at once instead of polling ``claim``. A True answer is a hint, not a
        promise (another worker may claim first; the token is per queue slot: per namespace in
        layout 4, so ``queues`` does not narrow it there); False means the timeout passed. One token
        wakes one waiter. The wait also ends (True) when the first scheduled or retry task of the
        queues' slots falls due, as the last claim read it (``dues.py``: once, up to a server tick
        early); a call that schedules or retries a task due within a minute pushes the token, so a
        waiter claims and reads the new due time. ``timeout`` is capped at ``socket_timeout - 1`` so the
        blocking pop never trips the socket timeout. Every slot of ``queues`` is waited on (each
        partition of a partitioned queue): on one server in one ``BLPOP``, on a cluster (where one
        ``BLPOP`` may not name keys of two slots) one per slot, sent together, the first token
        ending the wait (``slotwaits.py``).
        """
        return waits.wait_for_work(self, queues, timeout)

    def preflight(self) -> list[Finding]:
        """``ChecksServer``: the eviction policy and persistence, each ok or what to set instead; on a
        cluster, the nodes and slots, then the same per master (``preflight.py``)."""
        return preflight.findings(self._client, self._wait, self.cluster)
