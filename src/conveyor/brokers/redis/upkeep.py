"""``promote`` and ``reap`` over the queue slots of a Redis Cluster, where each slot is a call of its
own. A ``limit`` too small for every due entry goes to the earliest over all slots first, ties by
member (the slot's sequence number, which follows the enqueue order: ``ranked()`` in
``lua/enqueue.lua``), as ``memory://`` spends it over every queue; on one server the joined call does
the same in Lua (``spend()`` in ``lua/_upkeep.lua``).

Each round reads every slot's first due entries (``ZRANGEBYSCORE ... LIMIT``, one pipeline), merges
them here and sends each slot the members chosen in it, which its script moves if they are still
due: one moved meanwhile by another process is not counted (and the call may move fewer than
``limit`` while more are due, which the next call takes). Before that one pipeline of ``ZCOUNT``\\ s
tells whether the limit has room for everything due, the usual case, which then goes slot by slot as
before, to the slots holding something due only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from conveyor.brokers.redis.faults import translate_errors
from conveyor.brokers.redis.keys import Slot

if TYPE_CHECKING:
    import redis

__all__ = ["Call", "Clean", "Spend", "clean_slots", "counts", "promote_slots", "reap_slots", "spend"]

#: ``(operation, prefix, *args)``: the broker's script call in a slot, at the call's ``now``.
Call = Callable[..., Any]
#: ``(prefix, members)`` -> how many of them its script moved.
Spend = Callable[[str, list[str]], int]

#: ``(prefix, now, limit, passes, queues)`` -> how many tasks ``clean.lua`` deleted in that slot.
Clean = Callable[[str, float, int, str, Sequence[str]], int]

#: Rounds of a spend at most: a round more follows only entries dropped (their task gone), rare.
_ROUNDS = 4


def counts(client: redis.Redis, keys: Sequence[str], now: float) -> list[int]:
    """How many entries of each sorted set of ``keys`` are due by ``now`` (one pipeline)."""
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.zcount(key, "-inf", repr(float(now)))
        return [int(count) for count in pipe.execute()]


def _earliest(client: redis.Redis, prefixes: Sequence[str], name: str, now: float, n: int) -> list[tuple[str, str]]:
    """The first ``n`` entries due by ``now`` over each slot's sorted set ``name`` (a key of
    :class:`Slot`: ``due``, ``leases`` or ``expiring``), earliest first (ties by member): ``(prefix,
    member)`` each."""
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for prefix in prefixes:
            pipe.zrangebyscore(getattr(Slot(prefix), name), "-inf", repr(float(now)), start=0, num=n, withscores=True)
        replies = cast("list[list[tuple[str, float]]]", pipe.execute())
    entries: list[tuple[float, str, str]] = []
    for prefix, reply in zip(prefixes, replies, strict=True):
        entries += [(score, member, prefix) for member, score in reply]
    entries.sort()
    return [(prefix, member) for _, member, prefix in entries[:n]]


def spend(client: redis.Redis, prefixes: Sequence[str], name: str, now: float, limit: int, move: Spend) -> int:
    """Up to ``limit`` of the entries of each slot's ``name`` (:func:`_earliest`) due by ``now``, earliest
    first, each slot's chosen members sent to ``move`` (in the order of ``prefixes``); how many moved."""
    done = 0
    for _ in range(_ROUNDS):
        if done >= limit:
            break
        chosen = _earliest(client, prefixes, name, now, limit - done)
        if not chosen:
            break
        moved = 0
        for prefix in prefixes:
            members = [member for at, member in chosen if at == prefix]
            if members:
                moved += move(prefix, members)
        done += moved
        if moved == len(chosen):
            break
    return done


def promote_slots(client: redis.Redis, slots: Sequence[str], now: float, limit: int, call: Call) -> int:
    """``promote`` over several slots, a call per slot holding due tasks."""
    due = counts(client, [Slot(prefix).due for prefix in slots], now)
    busy = [prefix for prefix, count in zip(slots, due, strict=True) if count]
    if sum(due) > limit:
        move: Spend = lambda prefix, members: int(call("promote", prefix, limit, *members))  # noqa: E731
        return spend(client, busy, "due", now, limit, move)
    moved = 0
    for prefix in busy:
        moved += int(call("promote", prefix, max(0, limit - moved)))
    return moved


def reap_slots(client: redis.Redis, slots: Sequence[str], now: float, limit: int, call: Call, budget: int) -> int:
    """``reap`` over several slots, a call per slot holding due tasks, leases or deadlines: every due
    task promoted (``budget`` at most per slot), then the limit spent on the earliest expired leases,
    then on the earliest deadlines, over every slot."""
    names = [(slot.due, slot.leases, slot.expiring) for slot in map(Slot, slots)]
    found = counts(client, [name for three in names for name in three], now)
    due, leases, expiring = found[0::3], found[1::3], found[2::3]
    busy = [prefix for place, prefix in enumerate(slots) if due[place] or leases[place] or expiring[place]]
    done = 0
    if 2 * sum(leases) + sum(expiring) <= limit:  # room for all, a reaped lease's deadline too
        for prefix in busy:
            done += int(call("reap", prefix, max(0, limit - done), budget))
        return done
    for place, prefix in enumerate(slots):
        if due[place]:
            call("promote", prefix, budget)

    def moving(kind: str) -> Spend:
        return lambda prefix, members: int(call("reap", prefix, limit, budget, kind, *members))

    done = spend(client, busy, "leases", now, limit, moving("l"))
    return done + spend(client, busy, "expiring", now, limit - done, moving("x"))


def clean_slots(
    client: redis.Redis, groups: Sequence[tuple[str, list[str]]], now: float, limit: int, cap: int, clean: Clean
) -> int:
    """``clean`` over several slots (``groups``: each slot's queues, in the registry's order):
    ``memory://`` spends the limit on tasks past their ``keep_until`` everywhere before the archived
    beyond ``max_archived`` of any queue. One pipeline counts both; with room for all, a call per slot
    holding some makes both passes, else every slot's first pass comes before any second."""
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for prefix, queues in groups:
            names = Slot(prefix)
            for queue in queues:
                for part in ("completed:keep", "archived:keep"):
                    pipe.zcount(names.queue(queue, part), "-inf", repr(float(now)))
                pipe.zcard(names.queue(queue, "archived"))
        found = [int(count) for count in pipe.execute()]
    work: list[int] = []
    place = 0
    for _, queues in groups:
        slot = 0
        for _ in queues:
            slot += found[place] + found[place + 1] + max(0, found[place + 2] - cap)
            place += 3
        work.append(slot)
    removed = 0
    if sum(work) <= limit:
        for (prefix, queues), count in zip(groups, work, strict=True):
            if count:
                removed += clean(prefix, now, limit - removed, "kc", queues)
        return removed
    for passes in ("k", "c"):
        for prefix, queues in groups:
            if removed >= limit:
                return removed
            removed += clean(prefix, now, limit - removed, passes, queues)
    return removed
