"""An idle consumer's wait for work on Redis (docs/architecture.md, "How an idle worker wakes, per
broker"): a blocking pop on the ``wake`` list of each slot of its queues, which a call that made a
task pending (or due within a minute) pushes a token to, cut at the first due time the last claim
read (``dues.py``). On one server the pop names every list in one ``BLPOP``; on a cluster, which
refuses one over keys of several slots, it waits on each in turn.
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
    _wait_each(calls, wakes, timeout)  # one slot after another, then the claims at the server's TIME
    return claim(queues, "", lease_for, limit, ())


def wait_for_work(calls: RedisCalls, queues: Sequence[str], timeout: float) -> bool:
    """``RedisBroker.wait_for_work``: True on a token, or at the due time :mod:`dues` noted; False
    when ``timeout`` passed."""
    wakes = _wake_keys(calls, queues)
    timeout, due = calls._dues.cap(timeout)
    if timeout <= 0:
        return True
    if len(wakes) > 1 and not calls.joins_slots:
        return _wait_each(calls, wakes, timeout) or due
    with translate_errors():
        return calls._client.blpop(wakes, timeout=_block_for(calls, timeout)) is not None or due


def _wake_keys(calls: RedisCalls, queues: Sequence[str]) -> list[str]:
    """The ``wake`` lists of the slots of ``queues``."""
    keys = calls.keys
    if keys.one_slot:
        return [keys.wake]
    return list(dict.fromkeys(keys.slot(keys.queue_prefix(queue)).wake for queue in queues))


def _wait_each(calls: RedisCalls, wakes: Sequence[str], timeout: float) -> bool:
    """Block on each ``wake`` list in turn, a slice of ``timeout`` each, until one has a token: a
    cluster refuses one ``BLPOP`` over keys of several slots (one server takes them in one). A
    token already there is taken first, by an ``LPOP`` of each (one round trip per master), so it
    is not left waiting behind the other slots' slices."""
    share = timeout / len(wakes)
    client = calls._client
    with translate_errors():
        pipe = client.pipeline(transaction=False)
        for wake in wakes:
            pipe.lpop(wake)
        if any(token is not None for token in pipe.execute()):
            return True
        for wake in wakes:
            if client.blpop([wake], timeout=_block_for(calls, share)) is not None:
                return True
    return False


def _block_for(calls: RedisCalls, timeout: float) -> float:
    """A blocking pop's timeout: at least 10 ms, and short enough never to trip the socket timeout."""
    return min(max(0.01, timeout), max(0.01, calls.config.socket_timeout - 1.0))
