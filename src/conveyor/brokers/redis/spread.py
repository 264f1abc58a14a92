"""The broker's calls over a queue's partitions (``partitions.py``; docs/architecture.md, "Partitions").

``Spreading`` sits between ``RedisCalls`` and ``RedisBroker``: it reads the namespace slot's
``parts`` hash (at most every :data:`partitions.REFRESH` seconds) and answers, per queue, the slots a
call visits. Where slots are split, a generated id names the partition it goes to (its label after
``~``, chosen in rotation; a batch's in runs over as few partitions as its calls need), a custom id
the partition a CRC32 of it picks; claims start at the next partition on every call, retired ones
included, so none starves, those found dry lately last; listeners, promote, reap, clean,
stats and history visit every partition's slot. In layout 4 (one slot) nothing is spread: the count
is stored and reported, and every hook answers the one slot.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

from conveyor.brokers.redis.addressing import RedisCalls
from conveyor.brokers.redis.admin import queue_infos
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK
from conveyor.brokers.redis.faults import translate_errors
from conveyor.brokers.redis.keys import queue_label
from conveyor.brokers.redis.partitions import CHANGES, GRACE, REFRESH, Spread, merge_stats, read_spreads, share
from conveyor.model import NewTask, QueueInfo, QueueSettings

__all__ = ["DRY_FOR", "Spreading", "upkeep_first"]

#: Seconds a partition where a claim found fewer tasks than it asked for comes last in this
#: process's claims of its queue (``Spreading._claimed_in``).
DRY_FOR = 1.0


def upkeep_first(runs: Sequence[tuple[str, Sequence[str]]], budget: int) -> str:
    """``claim.lua``'s A(4) for one call over the slots of ``runs`` (``RedisCalls._joined``): the
    maintenance ``budget``, then the places in A of the ``seq`` keys of the slots whose upkeep comes
    before any claim. Every later slot but a later partition of a queue (a labelled slot naming one
    queue that an earlier slot named) is such a slot; a later partition gets its upkeep in its turn."""
    places: list[str] = []
    named: set[str] = set(runs[0][1])
    place = 5 + len(runs[0][1])  # A(5) is the first queue
    for prefix, run in runs[1:]:
        labelled = "|" in prefix.partition("}")[0]
        if not (labelled and len(run) == 1 and run[0] in named):
            places.append(str(place))
        named.update(run)
        place += 1 + len(run)
    return " ".join((str(budget), *places))


class Spreading(RedisCalls):
    """``RedisCalls`` whose queues may each span several queue slots (their partitions)."""

    _parts: dict[str, Spread] | None = None
    _parts_at = 0.0

    @property
    def _parts_key(self) -> str:
        return self.keys.namespace_prefix + "parts"

    def _spreads_now(self, fresh: bool = False) -> dict[str, Spread]:
        """Every queue's :class:`Spread` that has one, read again when older than ``REFRESH``
        (redis-py's errors as they come)."""
        parts = self._parts
        if parts is None or fresh or time.monotonic() - self._parts_at > REFRESH:
            fields = cast("dict[str, str]", self._client.hgetall(self._parts_key))
            parts = self._parts = read_spreads(self.keys.namespace, fields)
            self._parts_at = time.monotonic()
        return parts

    def _spreads(self, fresh: bool = False) -> dict[str, Spread]:
        parts = self._parts
        if parts is not None and not fresh and time.monotonic() - self._parts_at <= REFRESH:
            return parts  # the common case, per task of an enqueue: no context manager
        with translate_errors():
            return self._spreads_now(fresh)

    def _turn(self, key: str, step: int = 1) -> int:
        """The next number of a per-queue rotation (claims, ids), ``step`` numbers taken. Each starts
        at a random place: processes that enqueue a task or two each (web workers) must not all begin
        with the first partition. Threads racing may take one number twice, which only skews the
        rotation."""
        turns: dict[str, int] = self.__dict__.setdefault("_turns", {})
        number = turns.get(key)
        if number is None:
            number = turns.setdefault(key, random.randrange(1 << 20))
        turns[key] = number + step
        return number

    def _queue_prefixes(self, queue: str, spreads: dict[str, Spread] | None = None) -> list[str]:
        """The prefixes of every slot of ``queue``: its partitions (active, then retired), or its one."""
        if self.keys.one_slot:
            return [self.keys.prefix]
        spread = (self._spreads() if spreads is None else spreads).get(queue)
        if spread is None:
            return [self.keys.queue_prefix(queue)]
        return [self.keys.label_prefix(label) for label in spread.visited]

    def _slot_groups(self, queues: Sequence[str]) -> list[tuple[str, list[str]]]:
        """``queues`` grouped by slot, a partitioned queue in each of its partitions' slots."""
        groups: dict[str, list[str]] = {}
        spreads = self._spreads()
        for queue in queues:
            for prefix in self._queue_prefixes(queue, spreads):
                groups.setdefault(prefix, []).append(queue)
        return list(groups.items())

    # -- hooks of RedisCalls ---------------------------------------------------------------------

    def _slots_of(self, queues: Iterable[str]) -> list[str]:
        spreads = self._spreads_now()
        return sorted({prefix for queue in queues for prefix in self._queue_prefixes(queue, spreads)})

    def _runs(self, queues: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
        """Runs of neighbouring queues in one slot (``RedisCalls._runs``); a partitioned queue is one
        run per partition, starting at the next in rotation on every call, retired ones included."""
        spreads = self._spreads()
        plain: list[str] = []
        for queue in queues:
            spread = spreads.get(queue)
            if spread is None or len(spread.visited) == 1:
                plain.append(queue)
                continue
            yield from super()._runs(plain)
            plain = []
            labels = spread.visited
            start = self._turn("claim " + queue) % len(labels)
            prefixes = [self.keys.label_prefix(label) for label in labels[start:] + labels[:start]]
            dry = self._dry
            if dry:  # stable: the rotation holds among the partitions with work, and among the dry
                now = time.monotonic()
                prefixes.sort(key=lambda prefix: now - dry.get(prefix, -DRY_FOR) < DRY_FOR)
            for prefix in prefixes:
                yield prefix, [queue]
        yield from super()._runs(plain)

    @property
    def _dry(self) -> dict[str, float]:
        """Slot prefix -> when a claim there last found fewer tasks than it asked for (monotonic)."""
        dry: dict[str, float] = self.__dict__.setdefault("_dry_at", {})
        return dry

    def _claimed_in(self, prefix: str, dry: bool) -> None:
        """Note what a claim's call to one slot found. A partition found dry (fewer tasks than asked)
        comes last in this process's claims for :data:`DRY_FOR` seconds: a queue whose tasks sit in
        some partitions only (a batch goes to few, ``_batch_suffixes``) would otherwise make most
        claims pass its empty ones first, a call each on a cluster. It is still visited whenever the
        partitions before it leave the claim unfilled, so none waits longer than that."""
        if dry:
            self._dry[prefix] = time.monotonic()
        elif prefix in self._dry:
            del self._dry[prefix]

    # -- routing tasks -------------------------------------------------------------------------

    def _id_suffix(self, queue: str) -> str:
        """A generated id's suffix (``LabelsIds``): ``~`` and the next active partition's label."""
        spread = self._spreads().get(queue)
        if spread is None or spread.count == 1:
            return self.keys.id_suffix(queue)
        return "~" + spread.labels[self._turn("id " + queue) % spread.count]

    def _batch_suffixes(self, count: int) -> Callable[[str], str]:
        """The suffixes of a batch of ``count`` generated ids (``LabelsIds.batch_id_suffixes``), asked
        for one by one in order: a partitioned queue's batch goes to ``ceil(count / ENQUEUE_CHUNK)``
        partitions, in even runs, the next ones in the queue's rotation (the one-task ids' rotation
        moved past them), so each partition's call carries up to a chunk, and successive batches
        still cover every partition in turn. A queue with ``max_size`` keeps the one-task rotation
        per task: a batch in one partition would meet that partition's share of the limit alone."""
        runs: dict[str, Iterator[str]] = {}

        def suffix(queue: str) -> str:
            run = runs.get(queue)
            if run is None:
                run = runs[queue] = self._batch_run(queue, count)
            return next(run)

        return suffix

    def _batch_run(self, queue: str, count: int) -> Iterator[str]:
        spread = self._spreads().get(queue)
        if spread is not None and spread.count > 1 and spread.max_size is None:
            parts = min(spread.count, -(-count // ENQUEUE_CHUNK))
            start = self._turn("id " + queue, parts)
            each, more = divmod(count, parts)
            for part in range(parts):
                label = "~" + spread.labels[(start + part) % spread.count]
                for _ in range(each + (part < more)):
                    yield label
        while True:  # anything asked past ``count``, or a queue without runs: one by one
            yield self._id_suffix(queue)

    def _enqueue_prefix(self, task: NewTask) -> str:
        """The slot ``task`` is stored in: the partition its id names, or for a custom id the one a
        CRC32 of it picks. An id naming a partition the queue has not (any more) is refused: stored
        there, no claim would visit it."""
        spread = self._spreads().get(task.queue)
        if "~" not in task.id:
            if spread is None or spread.count == 1:
                return self.keys.queue_prefix(task.queue)
            return self.keys.label_prefix(spread.labels[zlib.crc32(task.id.encode()) % spread.count])
        label = task.id.rpartition("~")[2]
        for fresh in (False, True):  # a change another process made may not be read yet
            if fresh:
                spread = self._spreads(fresh).get(task.queue)
            if label in (spread.visited if spread is not None else (queue_label(task.queue),)):
                return self.keys.label_prefix(label)
        raise ValueError(f"task id {task.id!r} names a partition queue {task.queue!r} does not have")

    # -- reading and purging over partitions ----------------------------------------------------

    def _list(self, queue: str, state: str, now: float, offset: int, limit: int) -> list[Any]:
        """``list.lua``'s items for ``list_tasks``: a partitioned queue's partition after partition,
        each read from its start up to ``offset + limit``; layout 4's tasks last while a layout-5
        broker serves them in place (``upgrade.py``)."""
        prefixes = self._queue_prefixes(queue)
        old = self._old()
        if old:
            prefixes = [*prefixes, old]
        if len(prefixes) == 1:
            return cast("list[Any]", self._call("list", prefixes[0], now, queue, state, offset, limit))
        items: list[Any] = []
        for prefix in prefixes:
            items += self._call("list", prefix, now, queue, state, 0, offset + limit)
        return items[offset : offset + limit]

    def _purge(self, queue: str, state: str, now: float, count: int) -> int:
        """``purge`` of at most ``count`` tasks (-1: all), partition after partition."""
        purged = 0
        for prefix in self._queue_prefixes(queue):
            if 0 <= count <= purged:
                break
            purged += int(self._call("purge", prefix, now, queue, state, count - purged if count >= 0 else -1))
        return purged

    # -- settings over partitions --------------------------------------------------------------

    def _configure_spread(self, settings: QueueSettings, configure: Callable[[str, QueueSettings], None]) -> None:
        """``configure(prefix, settings)`` in every active partition (each with its share of the
        limits; a paused queue's new partitions paused first), then the queue's new spread stored, so
        no process enqueues into a partition before its settings are there. A queue never
        partitioned stays without an entry; in layout 4 the one slot gets the settings as given."""
        name, count = settings.name, settings.partitions
        old = self._spreads(fresh=True).get(name)
        if old is None and count == 1:
            configure(self.keys.queue_prefix(name), settings)
            return
        with translate_errors():
            now = float(self._client.time()[0])
        start = old or Spread.whole(self.keys.namespace, name)
        new = start.changed(self.keys.namespace, count, settings.max_size, settings.concurrency, now)
        if self.keys.one_slot:
            configure(self.keys.prefix, settings)
        else:
            prefixes = [self.keys.label_prefix(label) for label in new.labels]
            self._pause_new(name, prefixes, old)
            part = replace(
                settings, max_size=share(settings.max_size, count), concurrency=share(settings.concurrency, count)
            )
            for prefix in prefixes:
                configure(prefix, part)
        self._store_spread(old, new)

    def _pause_new(self, queue: str, prefixes: Sequence[str], old: Spread | None) -> None:
        """New partitions of a paused queue start paused (before any process enqueues into them)."""
        first = self.keys.queue_prefix(queue) if old is None else self.keys.label_prefix(old.visited[0])
        with translate_errors():
            if self._client.hget(self.keys.slot(first).settings(queue), "pa") == "1":
                self._write_pause(queue, prefixes, True)

    def _store_spread(self, old: Spread | None, new: Spread) -> None:
        """The queue's entry and its retired partitions in ``parts`` (one call: the namespace slot)."""
        fields: dict[Any, Any] = {f"{new.queue} {label}": repr(at) for label, at in new.retired.items()}
        fields[new.queue] = new.entry()
        back = [f"{new.queue} {label}" for label in (old.retired if old else ()) if label not in new.retired]
        with translate_errors():
            pipe = self._client.pipeline(transaction=False)
            pipe.hincrby(self._parts_key, f"{new.queue} {CHANGES}", 1)  # first: see _drop
            pipe.hset(self._parts_key, mapping=fields)
            if back:
                pipe.hdel(self._parts_key, *back)
            pipe.execute()
        self._parts = None

    def _write_pause(self, queue: str, prefixes: Sequence[str], paused: bool) -> None:
        with translate_errors():
            pipe = self._client.pipeline(transaction=False)
            for prefix in prefixes:
                pipe.hset(self.keys.slot(prefix).settings(queue), "pa", "1" if paused else "0")
            pipe.execute()

    def _forget_spread(self, queue: str, restore: Callable[[QueueSettings], None]) -> int | None:
        """``forget_queue`` of a partitioned queue: the three steps in every partition, the registry
        written once. While any partition holds tasks nothing is forgotten: the partitions already
        marked (their settings deleted) get the queue's settings back by ``restore``. Forgotten, the
        queue is whole again with no limits, as a queue never configured (its settings are in
        ``parts`` as well as in its partitions'); its partitions are retired, not dropped: a
        process that still has the old entry may enqueue into one, which must be visited when the
        queue is listed again."""
        settings = self._settings_of(queue)
        old = self._spreads(fresh=True).get(queue)
        marks: list[tuple[str, str]] = []
        tasks, known = 0, False
        for prefix in self._queue_prefixes(queue):
            marked = self._forget_mark(queue, prefix)
            known = known or marked is not None
            if isinstance(marked, int):
                tasks += marked
            elif marked is not None:
                marks.append((prefix, marked))
        if not tasks and known:
            self._unregister(queue)
            self._forget_spread_entry(old)
        for prefix, marker in marks:
            self._forget_finish(queue, marker, prefix)
        if tasks and marks and settings is not None:
            restore(settings)
        return tasks if tasks or known else None

    def _forget_spread_entry(self, old: Spread | None) -> None:
        """A forgotten queue's ``parts`` entry made that of a queue never configured: one whole slot
        and no limits, its partitions retired (layout 4 keeps the count and limits only there)."""
        if old is not None and (old.count, old.max_size, old.concurrency) != (1, None, None):
            with translate_errors():
                now = float(self._client.time()[0])
            self._store_spread(old, old.changed(self.keys.namespace, 1, None, None, now))

    def _settings_of(self, queue: str) -> QueueSettings | None:
        """``queue``'s settings as ``stats`` reports them (its first slot's), None if it has none."""
        prefixes = self._queue_prefixes(queue)
        rows = [row for prefix in prefixes for row in self._call("stats", prefix, 0.0, queue)]
        infos = self._queue_infos(rows[:1]) if rows else []
        return infos[0].settings if infos else None

    def _queue_infos(self, rows: Sequence[Any]) -> list[QueueInfo]:
        """``admin.queue_infos`` of ``rows`` (one per queue and slot) summed per queue, with each
        queue's own limits and its ``partitions``."""
        spreads = self._spreads(fresh=True)
        merged = queue_infos(merge_stats(rows, spreads))
        return [
            replace(info, settings=replace(info.settings, partitions=spreads[info.name].count))
            if info.name in spreads
            else info
            for info in merged
        ]

    def _drop_retired(self) -> int:
        """Take out of ``parts`` the retired partitions that are empty and older than the grace (see
        ``partitions.GRACE``); an enqueue can no longer reach them. Returns how many were dropped."""
        if self.keys.one_slot:
            return 0
        spreads = self._spreads()  # an older copy only drops less, or lists again (see _drop)
        if not any(spread.retired for spread in spreads.values()):
            return 0  # the common case: no round trip
        return self._drop(spreads, self._empty_retired(spreads))

    def _empty_retired(self, spreads: dict[str, Spread]) -> list[tuple[str, str]]:
        """``(queue, label)`` of the retired partitions ``spreads`` names that are past the grace
        and hold no task (no row in any state)."""
        with translate_errors():
            bound = float(self._client.time()[0]) - GRACE - self.config.socket_timeout
            old = [
                (spread.queue, label)
                for spread in spreads.values()
                for label, at in spread.retired.items()
                if at < bound and label not in spread.labels
            ]
            if not old:
                return []
            pipe = self._client.pipeline(transaction=False)
            for _, label in old:
                pipe.hlen(self.keys.slot(self.keys.label_prefix(label)).rows)
            return [(queue, label) for (queue, label), rows in zip(old, pipe.execute(), strict=True) if not rows]

    def _drop(self, spreads: dict[str, Spread], empty: Sequence[tuple[str, str]]) -> int:
        """Delete the fields of the partitions ``empty`` (found so in ``spreads``, read before). A
        queue whose partitions changed since that read (its ``#`` count moved) may have made one of
        them active, given it tasks and retired it again: those are listed again, retired now, to be
        checked anew. Returns how many stay dropped."""
        if not empty:
            return 0
        with translate_errors():
            self._client.hdel(self._parts_key, *(f"{queue} {label}" for queue, label in empty))
            queues = sorted({queue for queue, _ in empty})
            counts = cast("list[str | None]", self._client.hmget(self._parts_key, [f"{q} {CHANGES}" for q in queues]))
            now_at = dict(zip(queues, counts, strict=True))
            moved = {queue for queue in queues if int(now_at[queue] or 0) != spreads[queue].changes}
            at = repr(float(self._client.time()[0])) if moved else ""
            again = {f"{queue} {label}": at for queue, label in empty if queue in moved}
            if again:
                self._client.hset(self._parts_key, mapping=cast("dict[Any, Any]", again))
        self._parts = None
        return len(empty) - len(again)
