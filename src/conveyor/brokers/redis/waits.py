"""An idle consumer's wait for work on Redis (docs/architecture.md, "How an idle worker wakes, per
broker"): a blocking pop on the ``wake`` list of each slot of its queues (every partition of a
partitioned one), which a call that made a task pending (or due within a minute) pushes a token to,
cut at the first due time the last claim read (``dues.py``). On one server the pop names every list
in one ``BLPOP``; on a cluster, which refuses one over keys of several slots, one ``BLPOP`` per slot
is sent at once and the first token ends the wait (``slotwaits.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from conveyor.brokers.redis.connections import Command
from conveyor.brokers.redis.faults import translate_errors
from conveyor.clock import Clock
from conveyor.model import TaskRecord

if TYPE_CHECKING:
    from conveyor.brokers.redis.addressing import RedisCalls

__all__ = ["Claim", "claim_after_wait", "wait_for_work"]

#: ``RedisBroker._claim``: (queues, now or "" for the server's TIME, lease_for, limit, commands before).
Claim = Callable[[Sequence[str], str, float, int, Sequence[Command]], list[TaskRecord]]


def claim_after_wait(
    calls: RedisCalls, claim: Claim, queues: Sequence[str], clock: Clock, lease_for: float, limit: int, timeout: float
) -> list[TaskRecord]:
    """``RedisBroker.claim_after_wait``: on the server's clock the pop and the claim go in one write,
    the claim run at the server's TIME the moment the pop returns; on another, wait, then claim at
    ``clock()``."""
    if calls._clock is None or clock is not calls._clock:
        wait_for_work(calls, queues, timeout)
        return claim(queues, repr(float(clock())), lease_for, limit, ())
    wakes = _wake_keys(calls, queues)
    timeout, _ = calls._dues.cap(timeout)
    if timeout <= 0:  # due already: no wait
        return claim(queues, "", lease_for, limit, ())
    if len(wakes) == 1 or calls.joins_slots:
        blpop = ("BLPOP", *wakes, repr(_block_for(calls, timeout)))
        return claim(queues, "", lease_for, limit, [blpop])
    _wait_all(calls, wakes, timeout)  # every slot at once, then the claims at the server's TIME
    return claim(queues, "", lease_for, limit, ())


def wait_for_work(calls: RedisCalls, queues: Sequence[str], timeout: float) -> bool:
    """``RedisBroker.wait_for_work``: True on a token, or at the due time :mod:`dues` noted; False
    when ``timeout`` passed."""
    wakes = _wake_keys(calls, queues)
    timeout, due = calls._dues.cap(timeout)
    if timeout <= 0:
        return True
    if len(wakes) > 1 and not calls.joins_slots:
        return _wait_all(calls, wakes, timeout) or due
    with translate_errors():
        return calls._client.blpop(wakes, timeout=_block_for(calls, timeout)) is not None or due


def _wake_keys(calls: RedisCalls, queues: Sequence[str]) -> list[str]:
    """The ``wake`` lists of the slots of ``queues``: every partition's of a partitioned queue
    (``Spreading._slots_of``), so a task arriving in any of them wakes the waiter."""
    keys = calls.keys
    if keys.one_slot:
        return [keys.wake]
    with translate_errors():  # (the partitions may be read again: partitions.REFRESH)
        return [keys.slot(prefix).wake for prefix in calls._slots_of(queues)]


def _wait_all(calls: RedisCalls, wakes: Sequence[str], timeout: float) -> bool:
    """Block on every ``wake`` list of a cluster at once (``slotwaits.py``): True on a token."""
    with translate_errors():
        return calls._slot_waits.wait(calls._conns, wakes, _block_for(calls, timeout))


def _block_for(calls: RedisCalls, timeout: float) -> float:
    """A blocking pop's timeout: at least 10 ms, and short enough never to trip the socket timeout."""
    return min(max(0.01, timeout), max(0.01, calls.config.socket_timeout - 1.0))
