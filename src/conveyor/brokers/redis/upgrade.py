"""The online move from layout 4 (``{ns}:v4:``, one slot) to layout 5 (a slot per queue), for a broker
on layout 5's keys (docs/architecture.md, "From layout 4").

While layout 4's registry ``{ns}:v4:queues`` exists, its data is served where it is: a by-id call whose
id has no entry in layout 5's ``ids`` goes to layout 4's slot (every layout 4 id lacks ``~<label>``),
and one of a custom id refused where its entry leads goes there once more (a producer of the version
before, which cannot see layout 5, may store a second task of an id whose task moved; the move drops
it as a duplicate); claims, promote, reap and history visit it after layout 5's slots, stats add its
counts, and the listeners follow its channels. Layout 4's slot has the same key names after its prefix as a queue
slot of layout 5, so every script runs there unchanged. The janitor's tick moves its tasks, at
most :data:`BATCH` per call, for at most :data:`TICK_BUDGET` seconds a tick; the call that empties
layout 4 carries its queues' settings and the task declarations over and deletes the rest, its
registry last.

On one server a batch is one call (``upgrade.lua``), each task moved whole or not at all. On a
cluster no call may touch two slots, so a round goes copy-then-drop: (1) read a batch from layout 4;
(2) *stage* copies in their queue slots (``upgrade_slot.lua``: rows and side data, in no index, listed
in ``staged``), no claim nor by-id call finding them; (3) *drop* in layout 4's slot
(``upgrade_drop.lua``) each task whose row is still the one copied, naming its queue slot in ``ids``
in the same step (the namespace slot is layout 4's): by-id calls now find the copy; (4) *index* the
copies dropped, *unstage* the others (copied again in a later round). A crash after (2) leaves copies
no call sees; after (3), copies found by id but not by claims: the next mover's first round
*recovers* every queue slot's ``staged`` ids, indexing those ``ids`` names the slot for and deleting
the others. Movers take turns by a lock in the namespace slot (:data:`LOCK_FOR`), so one never
unstages another's copies between its steps; the drop checks the lock in the same script (it is in
that slot), so a mover that stalled past its lock drops nothing, and a stage never overwrites a task
already moved.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, cast

import redis

from conveyor.brokers.redis.keys import Keys, queue_label
from conveyor.brokers.redis.scripts import Arg

__all__ = ["BATCH", "LOCK_FOR", "RECHECK", "TICK_BUDGET", "Calls", "Upgrade"]


class Calls(Protocol):
    """What the mover needs of the broker (``addressing.RedisCalls``, which holds an :class:`Upgrade`)."""

    keys: Keys

    @property
    def client(self) -> redis.Redis: ...

    @property
    def joins_slots(self) -> bool: ...

    def _call(self, name: str, prefix: str, now: float, *args: Arg) -> Any: ...


log = logging.getLogger("conveyor.brokers.redis")

#: Tasks moved per call at most: one call holds the server for ~1 ms per 100 tasks.
BATCH = 500

#: Seconds of moving per janitor tick at most (each call is short; other calls run between them).
TICK_BUDGET = 1.0

#: Seconds a "layout 4 holds data" answer is trusted before it is read again.
RECHECK = 2.0

#: Seconds a cluster's mover holds the lock for a round: far longer than a round takes, so that a
#: mover alive is never taken for a dead one, short enough that a crashed mover's turn passes soon.
LOCK_FOR = 60.0

_SETTINGS = ("ms", "cc", "ag", "pa")


class Upgrade:
    """Whether layout 4 still holds data in the namespace, and the mover that empties it."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self.old = Keys(calls.keys.namespace)
        self._present = False
        self._read_at = float("-inf")
        self._cursor = "0"
        self._recovered = False
        self._carried = False
        self._token = secrets.token_hex(8)

    @property
    def prefix(self) -> str:
        """Layout 4's one slot, ``{ns}:v4:``."""
        return self.old.prefix

    def present(self) -> bool:
        """True while layout 4's registry exists (read at most every :data:`RECHECK` s; raises
        redis-py's errors as they come)."""
        now = time.monotonic()
        if now - self._read_at >= RECHECK:
            self._present = bool(self._calls.client.exists(self.old.queues))
            self._read_at = now
            if self._present and not self._carried:
                self._carry_settings()
                self._carried = True
        return self._present

    def _carry_settings(self) -> None:
        """Layout 4's queue settings copied where layout 5 has none, when this process first finds
        layout 4: a queue's tasks enqueued and claimed in layout 5 meanwhile keep its pause and limits
        (they came with its first batch moved, up to a janitor tick later, or never for a consumer
        without one). Changes after it are written in both layouts (``RedisBroker.configure_queue``)."""
        keys, old, client = self._calls.keys, self.old, self._calls.client
        queues = sorted(cast("set[str]", client.smembers(old.queues)))
        for queue in queues:
            values = cast("list[str | None]", client.hmget(old.settings(queue), _SETTINGS))
            settings = keys.slot(keys.queue_prefix(queue)).settings(queue)
            for name, value in zip(_SETTINGS, values, strict=True):
                if value is not None:
                    client.hsetnx(settings, name, value)

    def step(self, now: float, budget: float = TICK_BUDGET, batch: int = BATCH) -> int:
        """Move layout 4's tasks, ``batch`` per call (per round on a cluster), for up to ``budget``
        seconds (at least one call) while any are left: how many moved."""
        if not self.present():
            return 0
        moved, deadline = 0, time.monotonic() + budget
        while True:
            if self._calls.joins_slots:
                reply = self._calls._call("upgrade", self.prefix, now, self._cursor, batch, self.old.namespace)
                self._cursor, text, left = str(reply).split(" ")
                count, done = int(text), left == "0"
            else:
                count, done = self._turn(now, batch)
            moved += max(count, 0)
            if done:
                self._present, self._read_at = False, time.monotonic()
                log.info("layout 4's data moved to layout 5's keys")
                return moved
            if time.monotonic() >= deadline or count == -1:
                return moved

    # -- on a cluster: copy, then drop (see the module's docstring) ---------------------------------

    def _turn(self, now: float, batch: int) -> tuple[int, bool]:
        """One round under the lock: (tasks moved, whether layout 4 is empty); (-1, False) while
        another mover holds the lock."""
        client, lock = self._calls.client, self._calls.keys.prefix + "moving"
        if not client.set(lock, self._token, nx=True, px=int(LOCK_FOR * 1000)) and client.get(lock) != self._token:
            return -1, False
        client.pexpire(lock, int(LOCK_FOR * 1000))
        if not self._recovered:
            self._recover(now)
        self._recovered = False  # until this round is through: a failure leaves copies staged
        moved, done = self._round(now, batch)
        self._recovered = True
        if done:
            client.delete(lock)
        return moved, done

    def _recover(self, now: float) -> None:
        """Every queue slot's staged copies settled, by the namespace slot's ``ids``: indexed where it
        names their slot (the drop took them out of layout 4), else deleted (copied again later)."""
        keys, client = self._calls.keys, self._calls.client
        queues = sorted(cast("set[str]", client.smembers(keys.queues)))
        prefixes = sorted({keys.queue_prefix(queue) for queue in queues})
        pipe = client.pipeline(transaction=False)
        for prefix in prefixes:
            pipe.smembers(prefix + "staged")
        for prefix, staged in zip(prefixes, pipe.execute(), strict=True):
            ids = sorted(cast("set[str]", staged))
            if not ids:
                continue
            entries = cast("list[str | None]", client.hmget(keys.ids, ids))
            label = prefix[len(keys.namespace) + 2 : prefix.index("}")]
            named = [
                task_id for task_id, entry in zip(ids, entries, strict=True) if entry and entry.split(" ")[0] == label
            ]
            self._place(prefix, now, named, set(ids) - set(named))

    def _round(self, now: float, batch: int) -> tuple[int, bool]:
        """Read a batch of layout 4, stage it, drop it, index it: (tasks moved, layout 4 empty);
        (-1, False) when the lock passed to another mover meanwhile."""
        client = self._calls.client
        cursor, rows = client.hscan(self.old.rows, int(self._cursor), count=batch)
        self._cursor = str(cursor)
        tasks = [(str(task_id), str(row)) for task_id, row in list(cast("dict[str, str]", rows).items())[:batch]]
        moved = self._drop(now, self._copy(now, tasks)) if tasks else 0
        if moved < 0:
            return moved, False
        if client.hlen(self.old.rows):
            return moved, False
        self._finish()
        return moved, True

    def _copy(self, now: float, tasks: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
        """``tasks`` (id, row) of layout 4 staged in their queue slots: them by label."""
        keys, client = self._calls.keys, self._calls.client
        queues = {task_id: row.split(" ", 3)[2] for task_id, row in tasks}
        by_label: dict[str, list[tuple[str, str]]] = {}
        for task_id, row in tasks:
            by_label.setdefault(queue_label(queues[task_id]), []).append((task_id, row))
        client.sadd(keys.queues, *set(queues.values()))  # first, so that a recovery finds the slots
        sides = self._sides([task_id for task_id, _ in tasks], set(queues.values()))
        for label, group in by_label.items():
            self._stage(keys.label_prefix(label), now, group, sides)
        return by_label

    def _drop(self, now: float, by_label: dict[str, list[tuple[str, str]]]) -> int:
        """The staged tasks dropped from layout 4 if this mover still holds the lock (checked in the
        same script: a mover that lost it leaves its copies to the holder's recovery), then indexed, or
        unstaged where layout 4 changed them: how many moved, -1 without the lock."""
        keys = self._calls.keys
        args = [self.old.namespace, self._token]
        for label, group in by_label.items():
            for task_id, row in group:
                args += [task_id, row, label]
        reply = str(self._calls._call("upgrade_drop", self.prefix, now, *args))
        if reply == "lost":
            return -1
        dropped = set(reply.split("\n")[1:])
        for label, group in by_label.items():
            ids = [task_id for task_id, _ in group]
            index = [task_id for task_id in ids if task_id in dropped]
            self._place(keys.label_prefix(label), now, index, [task_id for task_id in ids if task_id not in dropped])
        return len(dropped)

    def _sides(self, ids: list[str], queues: Iterable[str]) -> dict[str, Any]:
        """Layout 4's side data of ``ids`` (result, last error, limit, traceback, failures), its enqueue
        counter and the settings of ``queues``, read in one pipeline."""
        old, pipe = self.old, self._calls.client.pipeline(transaction=False)
        for task_id in ids:
            for key in (old.results, old.lasterr, old.limits, old.tracebacks):
                pipe.hget(key, task_id)
            pipe.lrange(old.errors(task_id), 0, -1)
        pipe.get(old.seq)
        names = sorted(queues)
        for queue in names:
            pipe.hmget(old.settings(queue), _SETTINGS)
        replies = pipe.execute()
        sides: dict[str, Any] = {task_id: replies[5 * n : 5 * n + 5] for n, task_id in enumerate(ids)}
        sides[""] = replies[5 * len(ids)] or "0"
        for queue, values in zip(names, replies[5 * len(ids) + 1 :], strict=True):
            sides["qs " + queue] = values
        return sides

    def _stage(self, prefix: str, now: float, group: list[tuple[str, str]], sides: dict[str, Any]) -> None:
        queues = sorted({row.split(" ", 3)[2] for _, row in group})
        args: list[str | int] = ["stage", sides[""], len(queues)]
        for queue in queues:
            args += [queue, *("" if value is None else value for value in sides["qs " + queue])]
        for task_id, row in group:
            result, lasterr, limit, traceback, failures = sides[task_id]
            args += [task_id, row, *("" if v is None else "=" + v for v in (result, lasterr, limit, traceback))]
            args += [len(failures), *failures]
        self._calls._call("upgrade_slot", prefix, now, *args)

    def _place(self, prefix: str, now: float, index: Sequence[str], unstage: Iterable[str]) -> None:
        """The staged copies ``index`` indexed, ``unstage`` deleted."""
        void = sorted(unstage)
        if index:
            self._calls._call("upgrade_slot", prefix, now, "index", *index)
        if void:
            self._calls._call("upgrade_slot", prefix, now, "unstage", *void)

    def _finish(self) -> None:
        """Layout 4 without tasks: its queues' settings and the task declarations carried over (those
        of layout 5 kept), the rest deleted, its registry last."""
        keys, old, client = self._calls.keys, self.old, self._calls.client
        self._carry_settings()
        queues = sorted(cast("set[str]", client.smembers(old.queues)))
        if queues:
            client.sadd(keys.queues, *queues)
        declared = cast("dict[str, str]", client.hgetall(old.declared))
        for name, value in declared.items():
            client.hsetnx(keys.declared, name, value)
        client.delete(*(old.settings(queue) for queue in queues), old.declared, old.uniq, old.wake, old.listening)
        client.delete(old.due, old.leases, old.expiring)
        client.delete(old.seq, old.queues)
