"""An idle consumer's wait for work on Redis (docs/architecture.md, "How an idle worker wakes, per
broker"): a blocking pop on the ``wake`` list of each slot of its queues (every partition of a
partitioned one), which a call that made a task pending (or due within a minute) pushes a token to,
cut at the first due time the last claim read (``dues.py``). On one server the pop names every list
in one ``BLPOP``; on a cluster, which refuses one over keys of several slots, one ``BLPOP`` per slot
is sent at once and the first token ends the wait (``slotwaits.py``).

``InterruptsWaits``: each wait's pop also names a list of its own, ``halt``, in the slot of its first
``wake`` list, and an interrupt pushes a token there (:func:`interrupt`, from any thread), so the pop
returns as for a wake-up, at once, with its reply read on its own connection: on one server the
claim queued behind it runs and its reply is read as after any pop (no claimed task unseen, no reply
left on the connection); on a cluster the other slots' pops are ended as after any wake-up
(``slotwaits.py``). The interrupt itself needs no ``CLIENT`` command (``faults.NEEDED_ACL`` grants
none) and no connection closed under a waiter. A push that lands before the pop
reaches the server is not lost: the token waits in the list. A thread that claimed before an
interrupt and had not begun its wait then does not begin it (``conveyor.brokers.interrupts``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from conveyor.brokers.redis.connections import Command
from conveyor.brokers.redis.faults import CLIENT_ERRORS, translate_errors
from conveyor.clock import Clock
from conveyor.model import TaskRecord

if TYPE_CHECKING:
    from conveyor.brokers.redis.addressing import RedisCalls
    from conveyor.brokers.redis.keys import Slot

__all__ = ["HALT_TTL", "Claim", "claim_after_wait", "interrupt", "wait_for_work"]

log = logging.getLogger("conveyor.brokers.redis")

#: ``RedisBroker._claim``: (queues, now or "" for the server's TIME, lease_for, limit, commands before).
Claim = Callable[[Sequence[str], str, float, int, Sequence[Command]], list[TaskRecord]]

#: Milliseconds a wait's ``halt`` list lives after an interrupt pushed to it: its pop takes the token
#: at once, or had ended already and nobody ever will.
HALT_TTL = 60_000

_numbers = itertools.count()  # each wait's own halt list: the broker's origin and a number


def claim_after_wait(
    calls: RedisCalls, claim: Claim, queues: Sequence[str], clock: Clock, lease_for: float, limit: int, timeout: float
) -> list[TaskRecord]:
    """``RedisBroker.claim_after_wait``: on the server's clock the pop and the claim go in one write,
    the claim run at the server's TIME the moment the pop returns; on another, wait, then claim at
    ``clock()``. An interrupt ends the pop, and the claim runs as after any pop."""
    if calls._clock is None or clock is not calls._clock:
        wait_for_work(calls, queues, timeout)
        return claim(queues, repr(float(clock())), lease_for, limit, ())
    slots = _wake_slots(calls, queues)
    timeout, _ = calls._dues.cap(timeout)
    if timeout <= 0:  # due already: no wait
        return claim(queues, "", lease_for, limit, ())
    wakes, halt = [slot.wake for slot in slots], _halt(calls, slots[0])
    with calls._halts.waiting(halt) as blocking:
        if blocking and (len(wakes) == 1 or calls.joins_slots):
            blpop = ("BLPOP", *wakes, halt, repr(_block_for(calls, timeout)))
            return claim(queues, "", lease_for, limit, [blpop])
        if blocking:
            _wait_all(calls, wakes, halt, timeout)  # every slot at once, then the claims at the server's TIME
    return claim(queues, "", lease_for, limit, ())


def wait_for_work(calls: RedisCalls, queues: Sequence[str], timeout: float) -> bool:
    """``RedisBroker.wait_for_work``: True on a token, at the due time :mod:`dues` noted, or on an
    interrupt; False when ``timeout`` passed."""
    slots = _wake_slots(calls, queues)
    timeout, due = calls._dues.cap(timeout)
    if timeout <= 0:
        return True
    wakes, halt = [slot.wake for slot in slots], _halt(calls, slots[0])
    with calls._halts.waiting(halt) as blocking:
        if not blocking:
            return True
        if len(wakes) > 1 and not calls.joins_slots:
            return _wait_all(calls, wakes, halt, timeout) or due
        with translate_errors():
            return calls._client.blpop([*wakes, halt], timeout=_block_for(calls, timeout)) is not None or due


def interrupt(calls: RedisCalls) -> None:
    """``RedisBroker.interrupt_waits``: a token pushed to the ``halt`` list of each wait in progress,
    which its pop names beside the ``wake`` lists, so the pop returns as for a wake-up (on one server
    with the claim queued behind it, which runs and whose reply is read as after any pop). Never
    raises: a wait the push cannot reach ends at its timeout, or with the failure that kept the push
    from the server."""
    halts = calls._halts.interrupt()
    if not halts:
        return
    try:
        with calls._client.pipeline(transaction=False) as pipe:
            for halt in halts:
                pipe.lpush(halt, "1")
                pipe.pexpire(halt, HALT_TTL)
            pipe.execute()
    except CLIENT_ERRORS as exc:
        log.info("could not interrupt %d idle wait(s) (%s); each ends at its timeout", len(halts), exc)


def _wake_slots(calls: RedisCalls, queues: Sequence[str]) -> list[Slot]:
    """The slots whose ``wake`` lists a wait on ``queues`` blocks on: every partition's of a
    partitioned queue (``Spreading._slots_of``), so a task arriving in any of them wakes the waiter."""
    keys = calls.keys
    if keys.one_slot:
        return [keys.slot(keys.prefix)]
    with translate_errors():  # (the partitions may be read again: partitions.REFRESH)
        return [keys.slot(prefix) for prefix in calls._slots_of(queues)]


def _halt(calls: RedisCalls, slot: Slot) -> str:
    """A new wait's own ``halt`` list, in ``slot`` (the first its pops block on)."""
    return slot.halt(f"{calls._origin}:{next(_numbers)}")


def _wait_all(calls: RedisCalls, wakes: Sequence[str], halt: str, timeout: float) -> bool:
    """Block on every ``wake`` list of a cluster at once (``slotwaits.py``; ``halt`` in the first's
    slot): True on a token."""
    with translate_errors():
        return calls._slot_waits.wait(calls._conns, wakes, _block_for(calls, timeout), halt)


def _block_for(calls: RedisCalls, timeout: float) -> float:
    """A blocking pop's timeout: at least 10 ms, and short enough never to trip the socket timeout."""
    return min(max(0.01, timeout), max(0.01, calls.config.socket_timeout - 1.0))
