"""What an enqueue claims in the namespace slot before it stores its tasks in a queue slot apart from
it (docs/architecture.md, "Redis Cluster: keys per queue"): unique keys in ``uniq`` (key -> the task
holding it) and custom ids in ``ids`` (id -> the label of the slot its task is in; a generated id
carries its label and needs no entry). Two slots cannot be written in one step, so the writes go in
this order, one rule for both indexes:

1. ``take.lua`` (namespace slot) writes the entry, ``"<holder> <since>"``, for the first task of the
   chunk with each key or custom id, where it is free or names that task (or its slot) already, and
   answers what it names otherwise. The broker reads the named task's row in its slot: a live one
   (for a key: unfinished and within its ``unique_until``; for an id: visible) makes the task a
   duplicate; one not live, or absent while its entry is older than twice the socket timeout, is
   taken over by ``take.lua`` again, only while the entry still names it. An absent one with a younger
   entry may have its enqueue on the way: a duplicate too.
2. The queue slot's ``enqueue`` stores the chunk's tasks not refused, checking their unique keys and
   ids within its slot (a later task with an earlier one's key is its duplicate, as on one slot).

Then a key's claim whose task the queue slot refused passes to the task of the chunk with that key
that was stored instead, if any, else it is freed at once with ``release.lua``; an id's claim is
freed when its task was refused for its key or by ``QueueFull`` (refused as a duplicate id, a task
with that id is in the slot the entry names). A crash between 1 and 2 leaves an entry naming a task
never stored: the key, or the id in another queue, is refused until the entry is older than the
bound, then free; a read of the id finds no task; nothing acknowledged is lost. Deleting a task
frees its entries after its row (``remove_task()`` in ``_states.lua``).

On one server, which checks no slots, steps 1 and 2 are one call (``take_enqueue.lua``) while every
entry is free: it judges each by take's rule, stores the tasks by enqueue's body and then writes the
entries, as the two calls would; a refusal of the enqueue (``QueueFull``, a queue to register) then
writes nothing at all. Where some entry is not free it makes take's writes alone and refuses with
take's answers (:data:`TAKEN`), and the rounds go on from those answers as after a take of their own.

A task with a unique key but no ``unique_until`` (which the app never makes) holds nothing, as in
``memory://``, but is checked as any other: its entry is written, and taken over by the next task with
that key, since a holder without ``unique_until`` is never live.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.brokers.redis.codec import ROW_NAMES, escape_key
from conveyor.brokers.redis.faults import Refused, translate_errors
from conveyor.brokers.redis.partitions import prefix_label
from conveyor.brokers.redis.replication import Unreplicated
from conveyor.brokers.redis.scripts import Arg
from conveyor.model import NewTask

if TYPE_CHECKING:
    from conveyor.brokers.redis.addressing import RedisCalls

__all__ = ["ROUNDS", "TAKEN", "Store", "needs_claims", "store_claimed"]

#: Take-overs tried per entry and call; an entry whose holder keeps changing is then a duplicate.
ROUNDS = 3

_UNFINISHED = frozenset({"pending", "scheduled", "retry", "active"})
_UU, _KU = ROW_NAMES.index("uu"), ROW_NAMES.index("ku")

#: What ``store`` does with a chunk's tasks: per task None (stored) or the id it duplicates. Given
#: ``take_enqueue.lua``'s arguments before enqueue's (one server), it takes the entries in the same call
#: (``take_enqueue.lua``) if every one is free, and stores the tasks; else it raises ``Refused``
#: (:data:`TAKEN`, then take's answers), having made take's writes alone. Its other refusals
#: (``QueueFull``) then write nothing, the entries included.
Store = Callable[[Sequence[NewTask], Sequence[Arg]], list[str | None]]

#: How ``take_enqueue.lua`` refuses when some entry is not free: take's answers follow, tab-separated.
TAKEN = "CONVEYOR_TAKEN "


@dataclass
class _Entry:
    """One entry a chunk claims: in ``uniq`` ("u") or ``ids`` ("i"), its field, what it is to name,
    the places of its tasks (the first claims it), and what became of it."""

    index: str
    field: str
    value: str
    places: list[int]
    expected: str = ""  # what the next take may take the entry over from
    claim: str | None = None  # "fresh": this call wrote the entry; "named": it named the task already
    holder: str | None = None  # the task its tasks duplicate, when refused


def needs_claims(task: NewTask) -> bool:
    """Whether an enqueue of ``task`` claims entries first (split slots): a unique key, or a custom id."""
    return task.unique_key is not None or "~" not in task.id


def store_claimed(
    calls: RedisCalls, chunk: Sequence[NewTask], now: float, store: Store, prefix: str
) -> list[str | None]:
    """Enqueue ``chunk`` (one queue slot's, at most one call's worth) with its entries claimed first;
    ``store`` stores the tasks not refused in the slot ``prefix``, whose label a custom id's entry
    names (a partition's, where the queue has several). Per task None (stored) or the id it duplicates."""
    label = prefix_label(prefix)
    entries: dict[tuple[str, str], _Entry] = {}
    for place, task in enumerate(chunk):
        wanted = []
        if "~" not in task.id:
            wanted.append(("i", task.id, label))
        if task.unique_key is not None:  # without unique_until too: it holds nothing, but is checked
            wanted.append(("u", escape_key(task.unique_key), task.id))
        for index, field, value in wanted:
            entry = entries.get((index, field))
            if entry is None:
                entries[index, field] = _Entry(index, field, value, [place])
            else:
                entry.places.append(place)
    claimed = list(entries.values())
    first: list[str] | None = None  # take's answers, from the joined call
    if calls.joins_slots:  # one server: steps 1 and 2 in one call while every entry is free
        args = _joined_args(calls, chunk, claimed)
        try:
            joined = lambda tasks: store(tasks, args)  # noqa: E731
            return _stored(calls, chunk, claimed, [None] * len(chunk), joined, now, joined=True)
        except Refused as refused:
            if not refused.text.startswith(TAKEN):
                raise
            answers = refused.text.removeprefix(TAKEN).split("\t")
            first = answers + [""] * (len(claimed) - len(answers))  # in case a reply lost trailing tabs
    _claim(calls, chunk, claimed, now, first)
    results: list[str | None] = [None] * len(chunk)
    for entry in sorted(claimed, key=lambda entry: entry.index == "i"):  # a duplicate id first
        for place in entry.places if entry.holder is not None else ():
            results[place] = entry.holder
    return _stored(calls, chunk, claimed, results, lambda tasks: store(tasks, ()), now)


def _stored(
    calls: RedisCalls,
    chunk: Sequence[NewTask],
    entries: Sequence[_Entry],
    results: list[str | None],
    store: Callable[[Sequence[NewTask]], list[str | None]],
    now: float,
    joined: bool = False,
) -> list[str | None]:
    """Step 2 and what follows it, once ``entries`` are claimed or refused: ``store`` stores the tasks
    not refused (``results`` None), then the claims of tasks it refused are settled. ``joined``:
    ``store`` claims every entry in the same call, which writes them only where it stores the tasks."""
    sent = [place for place in range(len(chunk)) if results[place] is None]
    try:
        stored = store([chunk[place] for place in sent])
    except Refused:  # QueueFull: nothing of the chunk was written (nor, joined, any entry)
        if not joined:
            _settle(calls, chunk, entries, [task.id for task in chunk], now, full=True)
        raise
    except Unreplicated as short:  # stored; the broker withdraws the stored tasks, freeing their entries
        _claimed(entries, joined)
        for place, result in zip(sent, short.reply, strict=True):
            results[place] = result
        _settle(calls, chunk, entries, results, now)
        short.reply = results
        raise
    _claimed(entries, joined)
    for place, result in zip(sent, stored, strict=True):
        results[place] = result
    _ids_first(chunk, sent, results)
    _settle(calls, chunk, entries, results, now)
    return results


def _claimed(entries: Iterable[_Entry], joined: bool) -> None:
    """After a joined call stored its tasks: every entry was free and this call wrote it."""
    for entry in entries if joined else ():
        entry.claim = "fresh"


def _ids_first(chunk: Sequence[NewTask], sent: Sequence[int], results: list[str | None]) -> None:
    """A task refused for its key, not sent, whose id an earlier task of the chunk stored: its id
    answers, as one script checks a task's id before its key."""
    stored: dict[str, int] = {}
    for place in sent:
        if results[place] is None:
            stored.setdefault(chunk[place].id, place)
    unsent = set(range(len(chunk))).difference(sent)
    for place in sorted(unsent):
        task_id = chunk[place].id
        if stored.get(task_id, place) < place:
            results[place] = task_id


def _claim(
    calls: RedisCalls, chunk: Sequence[NewTask], entries: list[_Entry], now: float, first: list[str] | None
) -> None:
    """Step 1 for ``entries``: each ends claimed (``claim`` set) or refused (``holder`` set). ``first``:
    the first round's answers when a joined call took them already."""
    todo = entries
    for _ in range(ROUNDS):
        if not todo:
            return
        if first is not None:
            answers, first = first, None
        else:
            answers = _take(calls, [(entry.index, entry.field, entry.value, entry.expected) for entry in todo], now)
        named: list[tuple[_Entry, str, bool]] = []  # entries naming another task (or slot), and whether old
        for entry, answer in zip(todo, answers, strict=True):
            if answer == "":
                entry.claim = "fresh"
            elif answer == "=":
                entry.claim = "named"
                # does the task named hold the key? An id's slot checks itself, unless a task of it has
                # a key too: a visible task of that id must refuse it before its key's holder does
                if entry.index == "u" or any(chunk[place].unique_key is not None for place in entry.places):
                    named.append((entry, entry.value, True))
            else:
                holder, _, age = answer.partition(" ")
                named.append((entry, holder, age == "1"))
        rows = _rows(calls, chunk, named)
        todo = []
        for (entry, holder, old), row in zip(named, rows, strict=True):
            if row is not None and _live(entry.index, row, now):
                entry.claim, entry.holder = None, holder if entry.index == "u" else chunk[entry.places[0]].id
            elif entry.claim is None and (row is not None or old):
                entry.expected = holder
                todo.append(entry)
            elif entry.claim is None:  # absent, its entry young: its enqueue may be on the way
                entry.holder = holder if entry.index == "u" else chunk[entry.places[0]].id
    for entry in todo:
        entry.holder = entry.expected if entry.index == "u" else chunk[entry.places[0]].id


def _settle(
    calls: RedisCalls,
    chunk: Sequence[NewTask],
    entries: Iterable[_Entry],
    results: Sequence[str | None],
    now: float,
    full: bool = False,
) -> None:
    """The claims whose first task was not stored: a key's passed to the first of its tasks that was
    stored, else freed if this call made it; an id's freed if this call made it, unless its task was
    refused as a duplicate id (``full``: refused by ``QueueFull``, nothing stored)."""
    heirs: list[tuple[str, str, str, str]] = []
    freed: list[str] = []
    for entry in entries:
        first = entry.places[0]
        refusal = results[first]
        if entry.claim is None or refusal is None:
            continue
        heir = next((place for place in entry.places[1:] if results[place] is None), None)
        if heir is not None:  # an id's task stored after all (its second copy): its entry stays
            if entry.index == "u":
                heirs.append((entry.index, entry.field, chunk[heir].id, entry.value))
        elif entry.claim == "fresh" and (entry.index == "u" or full or refusal != chunk[first].id):
            freed.append(f"{entry.index} {entry.field} {entry.value}")
    if heirs:
        _take(calls, heirs, now)  # an entry that changed meanwhile is someone else's: left alone
    if freed:
        calls._release("\n".join(freed), now)


def _take(calls: RedisCalls, quads: Sequence[tuple[str, str, str, str]], now: float) -> list[str]:
    """``take.lua``'s answers for ``(index, field, value, expected or "")``."""
    args = _take_args(calls, quads)
    return str(calls._invoke("take", calls.keys.namespace_prefix, repr(float(now)), args)[1]).split("\n")


def _take_args(calls: RedisCalls, quads: Sequence[tuple[str, str, str, str]], old: str | None = None) -> list[Arg]:
    """``take.lua``'s arguments for ``(index, field, value, expected or "")`` (``old``: layout 4's
    prefix while it holds data, if the caller read it already)."""
    # layout 4's slot while it holds data: the namespace slot's own, {ns}, so take.lua may read it
    args: list[Arg] = [repr(2 * calls.config.socket_timeout), old or calls._old() or ""]
    for quad in quads:
        args += quad
    return args


def _joined_args(calls: RedisCalls, chunk: Sequence[NewTask], entries: Sequence[_Entry]) -> list[Arg]:
    """``take_enqueue.lua``'s arguments before enqueue's, to take ``entries`` free of any holder: for
    one task while layout 4 holds no data, ``"=<bound>"`` alone (its entries are the task's own, which
    the script reads from enqueue's arguments: six arguments fewer, each of which costs the server);
    else take's count and arguments."""
    old = calls._old()
    if len(chunk) == 1 and not old:
        return ["=" + repr(2 * calls.config.socket_timeout)]
    take = _take_args(calls, [(entry.index, entry.field, entry.value, "") for entry in entries], old)
    return [len(take), *take]


def _rows(calls: RedisCalls, chunk: Sequence[NewTask], named: Sequence[tuple[_Entry, str, bool]]) -> list[str | None]:
    """The row each entry of ``named`` points at, read in its slot (None: no such task): for a key the
    task it names (its slot by its id), for an id the task of that id in the slot labelled."""
    if not named:
        return []
    keys = calls.keys
    holders = [holder for entry, holder, _ in named if entry.index == "u"]
    prefixes = iter(calls._task_prefixes(holders))
    with translate_errors():
        pipe = calls.client.pipeline(transaction=False)
        for entry, holder, _ in named:
            if entry.index == "u":
                pipe.hget(keys.slot(next(prefixes)).rows, holder)
            else:
                task_id = chunk[entry.places[0]].id
                pipe.hget(keys.slot(keys.label_prefix(holder)).rows, task_id)
        return list(pipe.execute())


def _live(index: str, row: str, now: float) -> bool:
    """Whether the task of ``row`` holds its entry at ``now``: a unique key while it is unfinished and
    within its unique_until, an id while it is visible (before its keep_until)."""
    fields = row.split(" ", _UU + 1)
    if index == "u":
        return fields[0] in _UNFINISHED and fields[_UU] != "-" and now < float(fields[_UU])
    return fields[_KU] == "-" or now < float(fields[_KU])
