"""Unique keys claimed in the namespace slot before an enqueue stores their tasks in a queue slot apart
from it (docs/architecture.md, "Redis Cluster: keys per queue"). Two slots cannot be written in one
step, so the writes go in this order:

1. ``take.lua`` (namespace slot) writes ``uniq[key] = "<id> <since>"`` for the first task of the chunk
   with each key, where the key is free or its entry names that task already, and answers the holder
   otherwise. The broker reads the holder's row in the holder's slot: unfinished and within its
   ``unique_until``, it makes the task a duplicate; finished, past it, or absent while its entry is
   older than twice the socket timeout, it is taken over by ``take.lua`` again, only while the entry
   still names it. An absent holder with a younger entry may have its enqueue on the way: a duplicate.
2. The queue slot's ``enqueue`` stores the chunk's tasks not refused, checking their unique keys
   within the call only (a later task with a key of an earlier one is its duplicate, as on one slot).

Then a claim whose task the queue slot refused (a duplicate id) passes to the task of the chunk with
that key that was stored instead, if any, else it is freed at once with ``release.lua`` (after
``QueueFull`` too). A crash between 1 and 2 leaves an entry naming a task never stored: its key is
refused until the entry is older than the bound, then free; nothing acknowledged is lost.

A task with a unique key but no ``unique_until`` (which the app never makes) claims nothing and is
checked within its call only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.brokers.redis.codec import ROW_NAMES, escape_key
from conveyor.brokers.redis.faults import Refused, translate_errors
from conveyor.brokers.redis.replication import Unreplicated
from conveyor.model import NewTask

if TYPE_CHECKING:
    from conveyor.brokers.redis.addressing import RedisCalls

__all__ = ["ROUNDS", "store_claimed"]

#: Take-overs tried per key and call; a key whose holder keeps changing is then answered as a duplicate.
ROUNDS = 3

_UNFINISHED = frozenset({"pending", "scheduled", "retry", "active"})
_UU = ROW_NAMES.index("uu")

#: What ``store`` does with a chunk's tasks: per task None (stored) or the id it duplicates.
Store = Callable[[Sequence[NewTask]], list[str | None]]


@dataclass
class _Key:
    """One unique key of a chunk: the places of its tasks (the first claims it) and what became of it."""

    escaped: str
    places: list[int]
    expected: str = ""  # the holder the next take may take the entry over from
    claim: str | None = None  # "fresh": this call wrote the entry; "named": it named the task already
    holder: str | None = None  # the task its tasks duplicate, when refused


def store_claimed(calls: RedisCalls, chunk: Sequence[NewTask], now: float, store: Store) -> list[str | None]:
    """Enqueue ``chunk`` (one queue slot's, at most one call's worth) with its unique keys claimed
    first; ``store`` stores the tasks not refused. Per task None (stored) or the id it duplicates."""
    keys: dict[str, _Key] = {}
    for place, task in enumerate(chunk):
        if task.unique_key is not None and task.unique_until is not None:
            key = keys.get(task.unique_key)
            if key is None:
                keys[task.unique_key] = _Key(escape_key(task.unique_key), [place])
            else:
                key.places.append(place)
    _claim(calls, chunk, list(keys.values()), now)
    results: list[str | None] = [None] * len(chunk)
    for key in keys.values():
        for place in key.places if key.holder is not None else ():
            results[place] = key.holder
    sent = [place for place in range(len(chunk)) if results[place] is None]
    try:
        for place, result in zip(sent, store([chunk[place] for place in sent]), strict=True):
            results[place] = result
    except Refused:  # QueueFull: nothing of the chunk was written
        _settle_claims(calls, chunk, keys.values(), [task.id for task in chunk], now)
        raise
    except Unreplicated as short:  # stored; the broker withdraws the stored tasks, freeing their keys
        for place, result in zip(sent, short.reply, strict=True):
            results[place] = result
        _settle_claims(calls, chunk, keys.values(), results, now)
        short.reply = results
        raise
    _settle_claims(calls, chunk, keys.values(), results, now)
    return results


def _claim(calls: RedisCalls, chunk: Sequence[NewTask], keys: list[_Key], now: float) -> None:
    """Step 1 for ``keys``: each ends claimed (``claim`` set) or refused (``holder`` set)."""
    todo = keys
    for _ in range(ROUNDS):
        if not todo:
            return
        answers = _take(calls, [(key.escaped, chunk[key.places[0]].id, key.expected) for key in todo], now)
        held: list[tuple[_Key, str, bool]] = []
        for key, answer in zip(todo, answers, strict=True):
            if answer == "":
                key.claim = "fresh"
            elif answer == "=":  # the entry named this very id: is it a task holding the key?
                key.claim = "named"
                held.append((key, chunk[key.places[0]].id, True))
            else:
                holder, _, age = answer.partition(" ")
                held.append((key, holder, age == "1"))
        rows = _rows(calls, [holder for _, holder, _ in held])
        todo = []
        for (key, holder, old), row in zip(held, rows, strict=True):
            if row is not None and _holds(row, now):
                key.claim, key.holder = None, holder
            elif key.claim is None and (row is not None or old):
                key.expected = holder
                todo.append(key)
            elif key.claim is None:  # absent, its entry young: its enqueue may be on the way
                key.holder = holder
    for key in todo:
        key.holder = key.expected


def _settle_claims(
    calls: RedisCalls, chunk: Sequence[NewTask], keys: Iterable[_Key], results: Sequence[str | None], now: float
) -> None:
    """The claims whose first task was not stored: passed to the first of its key's tasks that was
    stored, else freed (a claim this call made; an entry that named the task before is left)."""
    heirs: list[tuple[str, str, str]] = []
    freed: list[str] = []
    for key in keys:
        first = key.places[0]
        if key.claim is None or results[first] is None:
            continue
        heir = next((place for place in key.places[1:] if results[place] is None), None)
        if heir is not None:
            heirs.append((key.escaped, chunk[heir].id, chunk[first].id))
        elif key.claim == "fresh":
            freed.append(f"{key.escaped} {chunk[first].id}")
    if heirs:
        _take(calls, heirs, now)  # an entry that changed meanwhile is someone else's: left alone
    if freed:
        calls._release("\n".join(freed), now)


def _take(calls: RedisCalls, triples: Sequence[tuple[str, str, str]], now: float) -> list[str]:
    """``take.lua``'s answers for ``(escaped key, id, expected holder or "")`` triples."""
    args = [repr(2 * calls.config.socket_timeout)]
    for triple in triples:
        args += triple
    return str(calls._invoke("take", calls.keys.namespace_prefix, repr(float(now)), args)[1]).split("\n")


def _rows(calls: RedisCalls, task_ids: Sequence[str]) -> list[str | None]:
    """The rows of ``task_ids``, each read in its own slot (None: no such task)."""
    if not task_ids:
        return []
    keys = calls.keys
    with translate_errors():
        pipe = calls.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(keys.slot(keys.task_prefix(task_id)).rows, task_id)
        return list(pipe.execute())


def _holds(row: str, now: float) -> bool:
    """Whether the task of ``row`` holds its unique key at ``now``: unfinished, within its unique_until."""
    fields = row.split(" ", _UU + 1)
    return fields[0] in _UNFINISHED and fields[_UU] != "-" and now < float(fields[_UU])
