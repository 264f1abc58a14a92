"""``enqueue`` on Redis: a call's tasks stored chunk by chunk in their queue slots (``RedisBroker``'s
producing side; the layout is in ``keys.py``).

In layout 5 a call is one ``enqueue.lua`` call per queue slot and chunk of :data:`ENQUEUE_CHUNK`
tasks (the atomic unit, and the ``QueueFull`` unit; ``fanout.py`` joins neighbouring chunks of
several slots into one call on one server, and sends the slots' calls at once on a cluster, where it
may): a partitioned queue's tasks go to the partitions their ids name (``spread.py``), custom ids
and unique keys are claimed in the namespace slot first (``claims.py``). Two things keep such a call
the reference's (``memory://``) in what it answers and tells: its subscribers hear its events in the
order of its tasks, not slot by slot; and where one id or unique key is in tasks of two slots, the
call goes slot run by slot run in the order of its tasks rather than slot by slot, so the first task
in the call is the one stored (as in one script), and a later task whose id or key an earlier run
stored is its duplicate without being sent. In layout 4 (one slot) a call is one call per chunk, the
namespace slot declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from conveyor.brokers.redis import admin, claims, fanout
from conveyor.brokers.redis.calls import (
    ENQUEUE_CHUNK,
    Ranks,
    chunk_args,
    duplicates,
    enqueue_args,
    numbered,
    one_task_args,
)
from conveyor.brokers.redis.faults import Refused
from conveyor.brokers.redis.replication import Unreplicated
from conveyor.brokers.redis.scripts import Arg, new_token
from conveyor.brokers.redis.spread import Spreading
from conveyor.errors import BrokerError, QueueFull, ReplicationTimeout
from conveyor.model import Event, NewTask

__all__ = ["Producing", "tell_stored"]

#: A place of a call's results not answered yet (an id is never empty).
UNSENT = ""

#: The refusals that may come after part of a call was stored.
PARTLY = (QueueFull, ReplicationTimeout)


def tell_stored(
    refused: QueueFull | ReplicationTimeout, tasks: Sequence[NewTask], results: Sequence[str | None]
) -> None:
    """Name in ``refused.stored`` the tasks ``results`` says were stored (None) so far; a place not
    answered yet (:data:`UNSENT`, or past the list's end) was not. Called where a refusal passes
    through a way of storing a call (``except PARTLY``): nested ones add disjoint parts, as an inner
    call's answers reach the outer's ``results`` only once it returned."""
    stored = [task.id for task, result in zip(tasks, results, strict=False) if result is None]
    if stored:
        refused.stored = (*refused.stored, *stored)


class Producing(Spreading):
    """``Spreading`` with the Broker contract's ``enqueue``."""

    #: How many tasks this broker's calls have sent, the slot its last call went to alone (None:
    #: several, or none yet), and each slot's ``seq`` as its calls left it: see :meth:`_ranks`.
    _sent = 0
    _sent_to: str | None = None
    _seqs: dict[str, int] | None = None

    def enqueue(self, tasks: Sequence[NewTask], now: float) -> list[str | None]:
        keys = self.keys
        if keys.one_slot:
            return self._enqueue(keys.prefix, tasks, now)
        groups = self._by_slot(tasks, self._enqueue_prefix)  # a partition each (spread.py)
        ranks = self._ranks(tasks, groups)
        if len(groups) == 1:  # the most common call
            return self._enqueue(groups[0][0], tasks, now, ranks)
        results: list[str | None] = [UNSENT] * len(tasks)
        try:
            if _contested(tasks, groups):
                self._enqueue_in_order(tasks, _runs(groups), now, results, ranks)
                return results
            of_id: dict[str, list[int]] = {}  # each id's places in the call
            for place, task in enumerate(tasks):
                of_id.setdefault(task.id, []).append(place)

            def stored_at(event: Event) -> int:
                """The place of the task an event is of: the first of its id that was stored (an earlier
                one may have been a duplicate of its unique key), read once the calls answered."""
                mine = of_id.get(event.task_id) or [0]
                return next((place for place in mine if results[place] is None), mine[0])

            with self._events.held(stored_at):  # told in the tasks' order
                way = fanout.way(self, tasks)
                if way is not None:  # fewer calls than slot after slot, or at once (fanout.py)
                    try:
                        way(self, tasks, groups, repr(float(now)), results, ranks)
                    except Refused as exc:
                        raise self._queue_full(exc) from None
                    return results
                for prefix, places in groups:  # one slot's chunks after another, as chunks go (the docstring)
                    stored = self._enqueue(prefix, [tasks[i] for i in places], now, ranks)
                    for place, result in zip(places, stored, strict=True):
                        results[place] = result
        except PARTLY as refused:
            tell_stored(refused, tasks, results)
            raise
        return results

    def _queue_full(self, refused: Refused) -> QueueFull:
        """``enqueue.lua``'s refusal of a full queue, ``CONVEYOR_QUEUEFULL <queue> <max_size>``, as raised:
        a partition refuses at its share of the queue's ``max_size``, the user is told the queue's own."""
        _, queue, max_size = refused.text.split(" ")
        spread = self._spreads().get(queue)
        configured = None if spread is None else spread.max_size
        return QueueFull(queue, int(float(max_size)) if configured is None else configured)

    def _slot_seqs(self) -> dict[str, int]:
        """Each slot's ``seq`` as this broker's calls left it (see :meth:`_ranks`), to update."""
        seqs = self._seqs
        if seqs is None:
            seqs = self._seqs = {}
        return seqs

    def _ranks(self, tasks: Sequence[NewTask], groups: Sequence[tuple[str, list[int]]]) -> Ranks | None:
        """Each task's place in the order of this broker's calls (``id(task)`` -> rank), which its
        slot's call makes its sequence number (``numbers()`` in ``enqueue.lua``; this broker keeps
        what its calls left in each slot's ``seq``): a tie of time between tasks of two slots then
        goes to the one enqueued first, as in ``memory://``'s one sequence. None for a call to the
        slot the previous call went to alone, whose numbers are past every other's already. Exact
        for one broker object's calls; across processes ties go as the slots' numbers fall."""
        sent, single = self._sent, groups[0][0] if len(groups) == 1 else None
        self._sent = sent + len(tasks)
        if single is not None and single == self._sent_to:
            return None
        self._sent_to = single
        return {id(task): sent + place + 1 for place, task in enumerate(tasks)}

    def _enqueue_in_order(
        self,
        tasks: Sequence[NewTask],
        runs: Sequence[tuple[str, list[int]]],
        now: float,
        results: list[str | None],
        ranks: Ranks | None,
    ) -> None:
        """Store ``tasks`` run by run (``runs``: places in one slot, in the tasks' order), each task
        whose id or unique key an earlier run stored answered as its duplicate without being sent, as
        one script answers a later task of its call (whatever the key's ``unique_until``: a holder
        without one, or past it, would be taken over in the namespace slot). As
        in the script, an id already stored comes first: such a task's id is read (a rare case: one
        key in two queues of one call). ``results`` gets each task's answer."""
        ids: set[str] = set()
        keys: dict[str, str] = {}
        for prefix, places in runs:
            sent: list[int] = []
            first: dict[str, int] = {}  # the place of each id's first task sent in this run
            later: list[tuple[int, str]] = []  # a task of a key held whose id this run sends first
            for place in places:
                task = tasks[place]
                held = keys.get(task.unique_key) if task.unique_key is not None else None
                if task.id in ids or (held is not None and task.id not in first and self._exists(task.id, now)):
                    held = task.id
                elif held is not None and task.id in first:  # its id is stored first if that task is
                    later.append((place, held))
                    continue
                if held is None:  # answered once sent (a refusal then names what was stored)
                    first.setdefault(task.id, place)
                    sent.append(place)
                else:
                    results[place] = held
            stored = self._enqueue(prefix, [tasks[i] for i in sent], now, ranks)
            for place, result in zip(sent, stored, strict=True):
                results[place], task = result, tasks[place]
                if result is None:
                    ids.add(task.id)
                    if task.unique_key is not None:
                        keys.setdefault(task.unique_key, task.id)
            for place, held in later:
                task = tasks[place]
                results[place] = task.id if results[first[task.id]] in (None, task.id) else held

    def _exists(self, task_id: str, now: float) -> bool:
        """Whether a task ``task_id`` is stored and visible (before its ``keep_until``)."""
        item = admin.task_item(self._client, self.keys.slot(self._task_prefix(task_id)), task_id)
        return any(record.keep_until is None or now < record.keep_until for record in self._records([item]))

    def _enqueue(
        self, prefix: str, tasks: Sequence[NewTask], now: float, ranks: Ranks | None = None
    ) -> list[str | None]:
        """Enqueue ``tasks``, all of the queue slot ``prefix`` (``ranks``: see :meth:`_ranks`)."""
        if not tasks:
            return []
        at = repr(float(now))
        if len(tasks) == 1 and self._wait is None and (self.keys.one_slot or not claims.needs_claims(tasks[0])):
            try:  # the most common call
                return [self._enqueue_one(prefix, tasks[0], at, ranks) or None]
            except Refused as exc:
                raise self._queue_full(exc) from None
        stored: list[str | None] = []  # the chunks' answers so far
        try:
            try:
                if self._wait is not None:  # each chunk confirmed by the replicas (replication.py)
                    return self._wait.enqueue(
                        tasks,
                        lambda chunk: self._store_tasks(prefix, at, chunk, ranks),
                        lambda ids: self._invoke("withdraw", prefix, at, ids)[1],
                        stored,
                    )
                if not self.keys.one_slot:  # chunk by chunk, each in its queue slot alone
                    for start in range(0, len(tasks), ENQUEUE_CHUNK):
                        stored += self._store_tasks(prefix, at, tasks[start : start + ENQUEUE_CHUNK], ranks)
                    return stored

                def handle(reply: str) -> None:
                    stored.extend(duplicates(reply, min(ENQUEUE_CHUNK, len(tasks) - len(stored))))

                # layout 4: the next chunk is encoded while the server stores this one
                self._invoke_each("enqueue", prefix, at, enqueue_args(tasks), handle, namespace=True)
            except Refused as exc:
                raise self._queue_full(exc) from None
        except PARTLY as refused:
            tell_stored(refused, tasks, stored)
            raise
        return stored

    def _enqueue_one(self, prefix: str, task: NewTask, now: str, ranks: Ranks | None = None) -> str:
        """One task: "" if stored, else the existing task's id (see enqueue.lua). Without a unique key
        the call leaves the namespace slot out, which saves the server a declared key per call; the
        script refuses, before writing, when it needs it after all (a queue's first task)."""
        return self._store_chunk(prefix, now, one_task_args(task), task.unique_key is None, [task], ranks)

    def _store_tasks(
        self, prefix: str, now: str, chunk: Sequence[NewTask], ranks: Ranks | None = None
    ) -> list[str | None]:
        """One chunk's enqueue, per task None (stored) or the id it duplicates. With split slots its
        unique keys are claimed in the namespace slot first (``claims.py``; on one server in the same
        call); an ``Unreplicated`` it raises carries these results."""
        if not self.keys.one_slot and any(claims.needs_claims(task) for task in chunk):
            store = lambda rest, take: self._store_checked(prefix, now, rest, ranks, take)  # noqa: E731
            return claims.store_claimed(self, chunk, float(now), store, prefix)
        return self._store_checked(prefix, now, chunk, ranks)

    def _store_checked(
        self, prefix: str, now: str, chunk: Sequence[NewTask], ranks: Ranks | None = None, take: Sequence[Arg] = ()
    ) -> list[str | None]:
        """:meth:`_store_tasks` once any unique keys are claimed (split slots), or with ``take``,
        ``take_enqueue.lua``'s arguments before enqueue's, claimed in the same call (one server), or
        left to the script."""
        if not chunk:
            return []
        alone = not self.keys.one_slot or all(task.unique_key is None for task in chunk)
        try:
            reply = self._store_chunk(prefix, now, chunk_args(chunk), alone, chunk, ranks, take)
            return duplicates(reply, len(chunk))
        except Unreplicated as short:
            short.reply = duplicates(self._result(short.reply)[0], len(chunk))
            raise

    def _store_chunk(
        self,
        prefix: str,
        now: str,
        args: Sequence[Arg],
        alone: bool,
        chunk: Sequence[NewTask],
        ranks: Ranks | None,
        take: Sequence[Arg] = (),
    ) -> str:
        """One chunk's enqueue call: in its queue slot ``alone`` if it may (see :meth:`_enqueue_here`,
        which runs ``take`` first in the same call); else, in layout 4, declaring the namespace slot
        too. Numbered by ``ranks`` (``calls.numbered``)."""
        seqs = self._slot_seqs()
        args, top = numbered(args, chunk, ranks, seqs.get(prefix, 0))
        token = new_token()  # one call, however often sent: a repeat finds what its first send did
        refused = False
        try:
            reply = self._enqueue_here(prefix, now, args, token, take) if alone else None
            if reply is None:
                if not self.keys.one_slot:  # two slots in one call: refused by a cluster
                    raise BrokerError("an enqueue could not register its queue: forget_queue kept undoing it")
                reply = cast("str", self._invoke("enqueue", prefix, now, args, namespace=True, token=token)[1])
        except Refused:  # nothing written
            refused = True
            raise
        finally:
            if not refused:  # written, or maybe (a reply lost, replicas short)
                seqs[prefix] = top
        return reply


def _contested(tasks: Sequence[NewTask], groups: Sequence[tuple[str, list[int]]]) -> bool:
    """Whether an id or a unique key is in tasks of two of ``groups`` (slots)."""
    seen: dict[tuple[str, str], str] = {}
    for prefix, places in groups:
        for place in places:
            task = tasks[place]
            names = [("i", task.id)] if task.unique_key is None else [("i", task.id), ("u", task.unique_key)]
            if any(seen.setdefault(name, prefix) != prefix for name in names):
                return True
    return False


def _runs(groups: Sequence[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """The places of ``groups`` as runs of neighbouring places in one slot, in the order of places."""
    slot_of = {place: prefix for prefix, places in groups for place in places}
    runs: list[tuple[str, list[int]]] = []
    for place in sorted(slot_of):
        if runs and runs[-1][0] == slot_of[place]:
            runs[-1][1].append(place)
        else:
            runs.append((slot_of[place], [place]))
    return runs
