"""What the batch script calls send: ``enqueue.lua``'s and ``settle.lua``'s arguments, chunk by chunk.

One task travels as its fields, those at their defaults left out (``encode_one_task``); several as one
JSON array of ``_FIELDS`` values per task or outcome (``encode_task``, ``encode_outcome``), with long
values sent beside it rather than inside (see :data:`SPILL_AT`). The scripts read them back in
``lua/_call.lua`` (``batch_values()``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from conveyor.brokers.redis.codec import encode_one_task, encode_outcome, encode_task
from conveyor.brokers.redis.scripts import Arg
from conveyor.model import NewTask, Outcome

__all__ = [
    "ENQUEUE_CHUNK",
    "SETTLE_CHUNK",
    "SPAN",
    "SPILL_AT",
    "Ranks",
    "chunk_args",
    "duplicates",
    "enqueue_args",
    "joined_args",
    "numbered",
    "one_task_args",
    "settle_args",
]

#: Tasks per ``enqueue.lua`` call: one round trip and one atomic unit each, short enough not to hold
#: the server long (docs/performance-notes.md).
ENQUEUE_CHUNK = 500
#: Outcomes per ``settle.lua`` call.
SETTLE_CHUNK = 1000

#: Values travel to scripts as one JSON array (cjson.decode); UTF-8 as is, so only escapes are decoded.
_json_array = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

#: A value of a batch call at least this long (a body, a result, an error) travels as an argument of
#: its own, not inside the JSON array (see ``batch_values()`` in ``lua/_call.lua``): cjson reads every
#: byte, while an argument costs a fixed amount plus far less per byte; the two break even a little
#: below this length (docs/performance-notes.md).
SPILL_AT = 256
#: Values per task (``encode_task``) and per outcome (``encode_outcome``) in a batch call's array.
_FIELDS = 8


def _batch_args(count: int, values: list[str], places: Sequence[int]) -> tuple[Arg, ...]:
    """A batch call's arguments: ``count`` and the JSON array of ``values`` (``_FIELDS`` per item), the
    long values at ``places`` (indexes within an item) taken out of it and sent after it."""
    where: list[str] = []
    spilled: list[str] = []
    for place in places:
        for index in range(place, len(values), _FIELDS):
            value = values[index]
            if len(value) >= SPILL_AT:
                where.append(str(index + 1))  # its place in the script's (1-based) array
                spilled.append(value)
                values[index] = ""
    if not spilled:
        return (count, _json_array(values))
    return (count, _json_array(values), " ".join(where), *spilled)


def one_task_args(task: NewTask) -> tuple[Arg, ...]:
    """``enqueue.lua``'s arguments for one task: its fields as they are, those at their defaults left out."""
    return (1, *encode_one_task(task))


def chunk_args(chunk: Sequence[NewTask]) -> tuple[Arg, ...]:
    """``enqueue.lua``'s arguments for one chunk: one task's as :func:`one_task_args`, several as JSON."""
    if len(chunk) == 1:
        return one_task_args(chunk[0])
    values: list[str] = []
    for task in chunk:
        values.extend(encode_task(task))
    return _batch_args(len(chunk), values, (2,))  # long bodies apart


def joined_args(chunk: Sequence[NewTask]) -> tuple[Arg, ...]:
    """One slot's part of an enqueue over several slots (``joined()`` in ``enqueue.lua``): the batch
    form whatever its size, the places of the long bodies always there ("" for none), so the part's
    length tells where the next slot's starts."""
    values: list[str] = []
    for task in chunk:
        values.extend(encode_task(task))
    args = _batch_args(len(chunk), values, (2,))
    return args if len(args) > 2 else (*args, "")


def enqueue_args(tasks: Sequence[NewTask]) -> Iterator[tuple[Arg, ...]]:
    """``enqueue.lua``'s arguments, per chunk of :data:`ENQUEUE_CHUNK` tasks (:func:`chunk_args`)."""
    for start in range(0, len(tasks), ENQUEUE_CHUNK):
        yield chunk_args(tasks[start : start + ENQUEUE_CHUNK])


#: A call's tasks' places in the order of the broker's calls, by ``id(task)`` (``Producing._ranks``).
Ranks = dict[int, int]

#: ``enqueue.lua``'s ``A(1) = n + SPAN * step`` (``numbers()`` there): more than the tasks of a chunk.
SPAN = 1024


def numbered(
    args: Sequence[Arg], chunk: Sequence[NewTask], ranks: Ranks | None, last: int
) -> tuple[Sequence[Arg], int]:
    """``enqueue.lua``'s arguments for ``chunk`` with its tasks' numbers in ``A(1)`` (``numbers()``
    there), and the slot's ``seq`` after the call as far as this broker knows (``last``: before it).
    Without ``ranks`` the call moves it by the chunk's size; with them, to the chunk's last rank (past
    ``last`` and what the chunk needs), its tasks taking the numbers their ranks say: as one step
    where they are neighbours, a stride where evenly spaced, else a back per task."""
    count = len(chunk)
    if ranks is None:
        return args, last + count
    places = [ranks[id(task)] for task in chunk]
    first, final = places[0], places[-1]
    top = max(final, last + final - first + 1)
    if places == list(range(first, first + count)):
        return (count + SPAN * (top - last), *args[1:]), top
    stride = places[1] - places[0]
    if stride > 0 and places == list(range(first, final + 1, stride)):  # a partitioned queue's rotation
        return (f"{count} {top - last} *{stride}", *args[1:]), top
    backs = " ".join(str(final - place) for place in places)
    return (f"{count} {top - last} {backs}", *args[1:]), top


def duplicates(reply: str, count: int) -> list[str | None]:
    """``enqueue.lua``'s result for a chunk of ``count`` tasks, per task: None (stored) or the id of
    the task it duplicates."""
    if not reply:
        return [None] * count
    return [dup or None for dup in reply.split("\n")]


def settle_args(outcomes: Sequence[Outcome]) -> tuple[Arg, ...]:
    """``settle.lua``'s arguments for one chunk of at most :data:`SETTLE_CHUNK` outcomes."""
    values: list[str] = []
    for outcome in outcomes:
        values.extend(encode_outcome(outcome))
    return _batch_args(len(outcomes), values, (3, 4, 7))  # long results, errors and tracebacks apart
