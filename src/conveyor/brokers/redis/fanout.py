"""An enqueue's calls over several queue slots (a partitioned queue's partitions, or queues of slots
of their own), made other than slot after slot where the same tasks are stored and refused.

``Producing.enqueue`` sends a call's tasks of each slot in chunks of :data:`ENQUEUE_CHUNK`, slot after
slot. Two ways cut what that costs:

- :func:`joined`, on one server (which checks no slots): neighbouring chunks of several slots go in
  one call (``joined()`` in ``enqueue.lua``), which checks and stores each in turn as its own call
  would; a part refused after others were stored ends the call, and the broker goes on slot by slot
  from there. The same tasks stored and refused, in fewer calls and round trips.
- :func:`apart`, on a cluster (where a call keeps to one slot): the slots' calls are sent to their
  masters at once (``ClusterCalls.execute_apart``), each answered as if sent alone. Only where no part
  can be refused for a full queue (every queue partitioned, without ``max_size``), since slot after
  slot a refused part keeps the slots after it from being sent.

Neither takes a task that claims entries in the namespace slot first (a custom id or a unique key,
``claims.py``), nor ``wait_replicas``, whose withdrawal is per slot call (``replication.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import redis

from conveyor.brokers.redis import claims
from conveyor.brokers.redis.calls import ENQUEUE_CHUNK, Ranks, chunk_args, duplicates, joined_args, numbered
from conveyor.brokers.redis.cluster import ClusterCalls
from conveyor.brokers.redis.connections import Command, Connections
from conveyor.brokers.redis.faults import CLIENT_ERRORS, Refused, failure
from conveyor.brokers.redis.partitions import Spread
from conveyor.brokers.redis.replication import ReplicaWait
from conveyor.brokers.redis.scripts import Arg, Scripts, new_token
from conveyor.model import NewTask

__all__ = ["Host", "Way", "apart", "joined", "way"]


class Host(Protocol):
    """What the ways here use of the broker (``Producing``), named so that this module, which
    ``producing.py`` imports, need not import it back."""

    _wait: ReplicaWait | None
    _scripts: Scripts

    @property
    def _client(self) -> redis.Redis: ...
    @property
    def _conns(self) -> Connections | ClusterCalls: ...
    @property
    def joins_slots(self) -> bool: ...
    def _head(
        self, name: str, prefix: str, now: str, namespace: bool = ..., proof: str = ..., token: str = ...
    ) -> tuple[Arg, ...]: ...
    def _invoke(
        self,
        name: str,
        prefix: str,
        now: str,
        args: Sequence[Arg],
        before: Sequence[Command] = ...,
        namespace: bool = ...,
        proof: str = ...,
        token: str = ...,
    ) -> tuple[list[Any], Any, float]: ...
    def _result(self, reply: Any) -> tuple[Any, float]: ...
    def _spreads(self, fresh: bool = ...) -> dict[str, Spread]: ...
    def _slot_seqs(self) -> dict[str, int]: ...
    def _store_tasks(
        self, prefix: str, now: str, chunk: Sequence[NewTask], ranks: Ranks | None = ...
    ) -> list[str | None]: ...


#: How a call's tasks of several slots are stored: (broker, tasks, groups (a slot's places each),
#: now as sent, results to fill, ranks); a refusal raises ``Refused``.
Way = Callable[[Host, Sequence[NewTask], Sequence[tuple[str, list[int]]], str, list[str | None], Ranks | None], None]


def way(producing: Host, tasks: Sequence[NewTask]) -> Way | None:
    """:func:`joined` or :func:`apart` where either applies to ``tasks`` (of several slots), else None."""
    if producing._wait is not None or any(map(claims.needs_claims, tasks)):
        return None
    if producing.joins_slots:
        return joined
    spreads = producing._spreads()
    for queue in {task.queue for task in tasks}:
        spread = spreads.get(queue)
        if spread is None or spread.max_size is not None:
            return None
    return apart


def _parts(groups: Sequence[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """Each slot's places in chunks of :data:`ENQUEUE_CHUNK`, slot after slot."""
    return [
        (prefix, places[i : i + ENQUEUE_CHUNK])
        for prefix, places in groups
        for i in range(0, len(places), ENQUEUE_CHUNK)
    ]


def _fill(results: list[str | None], places: Sequence[int], stored: Sequence[str | None]) -> None:
    for place, result in zip(places, stored, strict=True):
        results[place] = result


# -- one server: joined calls ---------------------------------------------------------------------


def joined(
    producing: Host,
    tasks: Sequence[NewTask],
    groups: Sequence[tuple[str, list[int]]],
    now: str,
    results: list[str | None],
    ranks: Ranks | None,
) -> None:
    """The chunks slot after slot, neighbouring ones of :data:`ENQUEUE_CHUNK` tasks at most in one
    call. A chunk of one task goes alone, by the one-task call, which costs the server less than its
    part of a joined call."""
    parts = _parts(groups)
    while parts:
        size, count = len(parts[0][1]), 1
        while size > 1 and count < len(parts) and 1 < len(parts[count][1]) <= ENQUEUE_CHUNK - size:
            size += len(parts[count][1])
            count += 1
        call, parts = parts[:count], parts[count:]
        chunks = [(prefix, [tasks[i] for i in places]) for prefix, places in call]
        stored, full = _store_joined(producing, now, chunks, ranks) if count > 1 else ([], None)
        if full is not None:  # the parts before it stored: answered first, so that the refusal names them
            for (_, places), answers in zip(call, stored, strict=False):
                _fill(results, places, answers)
            raise full
        for (prefix, chunk), (_, places) in zip(chunks, call, strict=True):
            _fill(results, places, stored.pop(0) if stored else producing._store_tasks(prefix, now, chunk, ranks))


def _store_joined(
    producing: Host, now: str, chunks: Sequence[tuple[str, Sequence[NewTask]]], ranks: Ranks | None
) -> tuple[list[list[str | None]], Refused | None]:
    """One joined call for ``chunks`` (a slot's part each): per part stored, its tasks' answers.
    The parts after one refused are left out (the caller sends them slot by slot, so a queue not
    registered yet is, as ``_enqueue_here`` does it); with a full queue's refusal, returned beside
    them (the first part's refusal, nothing written, is raised)."""
    seqs = producing._slot_seqs()
    args: list[Arg] = [""]
    tops: list[int] = []
    for prefix, chunk in chunks:
        part, top = numbered(joined_args(chunk), chunk, ranks, seqs.get(prefix, 0))
        args += [prefix + "seq", *part] if tops else part
        tops.append(top)
    stored, refusal, rest = len(chunks), "", ""  # stored: the parts whose `seq` moved, or may have
    try:
        reply = cast("str", producing._invoke("enqueue", chunks[0][0], now, args, token=new_token())[1])
        if reply:
            head, _, rest = reply.partition("\n")
            count, _, refusal = head.partition(" ")
            stored = int(count)
    except Refused as exc:  # the first part refused: nothing written
        stored = 0
        if exc.text.startswith("CONVEYOR_NAMESPACE"):
            return [], None
        raise
    finally:
        for (prefix, _), top in zip(chunks[:stored], tops, strict=False):
            seqs[prefix] = top
    if not reply:
        return [[None] * len(chunk) for _, chunk in chunks], None
    lines = iter(rest.split("\n"))
    out = [[next(lines) or None for _ in chunk] for _, chunk in chunks[:stored]]
    if refusal and not refusal.startswith("CONVEYOR_NAMESPACE"):
        return out, Refused(refusal)
    return out, None


# -- a cluster: calls sent at once ----------------------------------------------------------------


def apart(
    producing: Host,
    tasks: Sequence[NewTask],
    groups: Sequence[tuple[str, list[int]]],
    now: str,
    results: list[str | None],
    ranks: Ranks | None,
) -> None:
    """Each slot's chunks in rounds, a round holding each slot's next chunk, its calls sent at once.
    A part refused because its queue is not registered in its slot yet wrote nothing: it is sent
    again alone, which registers it; a full queue's refusal (a ``max_size`` set since the broker
    read the queue's partitions) is raised once the round is done."""
    rounds: list[list[tuple[str, list[int]]]] = []  # round r: each slot's r-th chunk
    for prefix, places in groups:
        for turn, start in enumerate(range(0, len(places), ENQUEUE_CHUNK)):
            if turn == len(rounds):
                rounds.append([])
            rounds[turn].append((prefix, places[start : start + ENQUEUE_CHUNK]))
    for round_ in rounds:
        _send_round(producing, tasks, round_, now, results, ranks)


def _send_round(
    producing: Host,
    tasks: Sequence[NewTask],
    parts: Sequence[tuple[str, list[int]]],
    now: str,
    results: list[str | None],
    ranks: Ranks | None,
) -> None:
    """One round of :func:`apart`: a call per part (each of its own slot), sent at once."""
    conns = producing._conns
    assert isinstance(conns, ClusterCalls)  # apart() is for a cluster
    seqs = producing._slot_seqs()
    chunks = [[tasks[i] for i in places] for _, places in parts]
    commands: list[Command] = []
    before: list[int] = []
    for (prefix, _), chunk in zip(parts, chunks, strict=True):
        args, top = numbered(chunk_args(chunk), chunk, ranks, seqs.get(prefix, 0))
        head = producing._head("enqueue", prefix, now, token=new_token())
        commands.append(producing._scripts.command("enqueue", head, args))
        before.append(seqs.get(prefix, 0))
        seqs[prefix] = top  # written, or maybe (a reply lost); put back where refused
    try:
        replies = conns.execute_apart(commands)
    except CLIENT_ERRORS as exc:
        raise failure(exc) from exc
    full: Refused | None = None
    for (prefix, places), chunk, command, reply, last in zip(parts, chunks, commands, replies, before, strict=True):
        answer = _answer(producing, command, reply)
        if isinstance(answer, Refused):
            seqs[prefix] = last  # nothing written
            if not answer.text.startswith("CONVEYOR_NAMESPACE"):
                full = full or answer
                continue
            try:  # the round's other parts are written: each is answered before a refusal is raised
                _fill(results, places, producing._store_tasks(prefix, now, chunk, ranks))
            except Refused as again:
                full = full or again
            continue
        _fill(results, places, duplicates(producing._result(answer)[0], len(chunk)))
    if full is not None:
        raise full


def _answer(producing: Host, command: Command, reply: Any) -> Any:
    """A call's reply as the broker reads it: the call sent again where the node lacked the library
    (loaded first), a script's refusal as ``Refused``, any other error reply raised."""
    try:
        reply = producing._scripts.again_if_missing(producing._conns, producing._client, command, reply)
    except CLIENT_ERRORS as exc:
        raise failure(exc) from exc
    if isinstance(reply, redis.ResponseError):
        error = failure(reply)
        if isinstance(error, Refused):
            return error
        raise error from reply
    return reply
