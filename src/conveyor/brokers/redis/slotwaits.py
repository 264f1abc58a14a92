"""An idle consumer's wait on the ``wake`` lists of several slots of a cluster at once.

A cluster refuses one ``BLPOP`` over keys of several slots (``CROSSSLOT``), so :class:`SlotWaits`
sends one ``BLPOP`` per slot, each on a connection of its own taken from the hot path's stack of the
master serving that slot (``ClusterCalls.serving``), all before reading any, and then waits on all
their sockets at once (``selectors``, as ``listener.py`` reads its nodes' pub/sub sockets): the
first token, in whichever slot, ends the wait.

A pop left blocked would take a later token meant for another waiter, and its connection could not
serve anything else, so every pop still pending when the wait ends is ended before its connection
goes back: by ``CLIENT UNBLOCK`` sent on a free connection of its master (its id read by ``CLIENT
ID`` once per socket), after which its reply (nil, or a token it took meanwhile) is read; where the
ACL forbids ``CLIENT UNBLOCK`` (it is ``@dangerous``, which ``faults.NEEDED_ACL`` leaves out), the
connection is closed instead, which ends the pop server-side. A token taken that way is not lost:
the claim that follows every wait visits every slot of the queues. A wait that times out lets each
pop end at the server's own timeout (within a tick), so an idle worker closes and unblocks nothing.

A wait holds one connection per slot while it lasts, at most :data:`MOST_SLOTS` of them; they go
back to the stacks the broker's calls use, so an idle worker makes no connections of its own. The
first slot's pop also names the wait's ``halt`` list (``waits.py``): an interrupt's token there ends
the wait as a wake-up does.
"""

from __future__ import annotations

import logging
import selectors
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from redis.connection import AbstractConnection
from redis.exceptions import AskError, ClusterDownError, TryAgainError

from conveyor.brokers.redis.cluster import ClusterCalls
from conveyor.brokers.redis.dues import TICK

if TYPE_CHECKING:
    from conveyor.brokers.redis.connections import Connections

__all__ = ["MOST_SLOTS", "SlotWaits"]

log = logging.getLogger("conveyor.brokers.redis")

#: The most slots one wait blocks on (a connection each): a queue of more partitions is waited on
#: in windows of this many, the next window at the next wait, so each is watched in turn.
MOST_SLOTS = 64

#: How long after its pops' timeout a wait still reads their nil replies before ending them itself:
#: the server ends a blocking pop at its next tick (``dues.TICK``), each master at its own.
_SLACK = TICK + 0.05


@dataclass(slots=True, eq=False)
class _Pop:
    """One slot's ``BLPOP``: on ``conn``, taken from ``conns``; ``pending`` until its reply is read."""

    conns: Connections
    conn: AbstractConnection
    asked_id: bool = False  # ``CLIENT ID`` went before the pop: its reply comes first
    pending: bool = True
    broken: bool = False  # a read or write failed: closed before it goes back


class SlotWaits:
    """The waits on several slots at once of one broker (what they learnt: connection ids, whether
    ``CLIENT UNBLOCK`` is allowed)."""

    def __init__(self) -> None:
        # connection -> (its socket, the server's id for it): asked again when it reconnected
        self._ids: weakref.WeakKeyDictionary[AbstractConnection, tuple[object, int]] = weakref.WeakKeyDictionary()
        self._unblocks = True  # False once the server refused CLIENT UNBLOCK (the ACL)
        self._turn = 0  # where the next window starts when there are more than MOST_SLOTS slots

    def wait(self, cluster: ClusterCalls | Connections, wakes: Sequence[str], block: float, halt: str = "") -> bool:
        """Block on every list of ``wakes`` (of several slots) at once for up to ``block`` seconds:
        True when one gave a token (or a node answered with a redirect or failed: the claim that
        follows finds the way), False when every pop timed out. ``halt``, a list in the slot of
        ``wakes[0]``, is named by that slot's pop (an interrupt's token ends the wait like any other).
        Raises redis-py's errors. ``cluster`` may be one server's connections (a test's broker that
        calls per slot there)."""
        if not isinstance(cluster, ClusterCalls):
            return self._wait(lambda _wake: cluster, wakes, block, halt) is not False
        woken = self._wait(cluster.serving, wakes, block, halt)
        if woken is None:
            cluster.refresh()  # a node may have failed over: the claim and the next wait use the new one
        return woken is not False

    def _wait(
        self, serving: Callable[[str], Connections], wakes: Sequence[str], block: float, halt: str
    ) -> bool | None:
        """:meth:`wait`; None when a connection failed."""
        pops: list[_Pop] = []
        woken = False
        try:
            for number, wake in enumerate(self._window(wakes)):  # wakes[0] first
                keys = (wake, halt) if halt and number == 0 else (wake,)
                pops.append(self._send(serving(wake), keys, block))  # each kept as sent
            self._read_ids(pops)
            woken = self._select(pops, time.monotonic() + block + _SLACK)
        finally:
            woken = self._end(pops) or woken
        return None if any(pop.broken for pop in pops) else woken

    def _window(self, wakes: Sequence[str]) -> Sequence[str]:
        """The slots this wait blocks on: the first always (its pop names the wait's ``halt`` list),
        the others in turn."""
        if len(wakes) <= MOST_SLOTS:
            return wakes
        first, others = wakes[0], wakes[1:]
        start = self._turn % len(others)
        self._turn = start + MOST_SLOTS - 1
        return [first, *[*others[start:], *others[:start]][: MOST_SLOTS - 1]]

    def _send(self, conns: Connections, keys: Sequence[str], block: float) -> _Pop:
        pop = _Pop(conns, conns.take())
        conn = pop.conn
        try:
            known = self._ids.get(conn)
            if known is None or known[0] is not getattr(conn, "_sock", None):
                conn.send_command("CLIENT", "ID")  # type: ignore[no-untyped-call]
                pop.asked_id = True
            conn.send_command("BLPOP", *keys, repr(block))  # type: ignore[no-untyped-call]
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            pop.broken = True
            pop.pending = False
            log.debug("could not send a blocking pop; the claim after the wait goes on", exc_info=True)
        return pop

    def _read_ids(self, pops: Sequence[_Pop]) -> None:
        """Read the ``CLIENT ID`` replies of freshly connected pops (their ids are known afterwards)."""
        for pop in pops:
            if not pop.asked_id or pop.broken:
                continue
            pop.asked_id = False
            try:
                answer = pop.conn.read_response()
            except redis.ResponseError:
                continue  # an ACL stricter than NEEDED_ACL's +@connection: closed at the end, not unblocked
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                pop.broken, pop.pending = True, False
                continue
            self._ids[pop.conn] = (getattr(pop.conn, "_sock", None), int(answer))

    def _select(self, pops: Sequence[_Pop], until: float) -> bool:
        """Read replies as they come, until a token (True), every pop's nil (False) or ``until``."""
        waiting = [(pop, sock) for pop in pops if pop.pending and (sock := getattr(pop.conn, "_sock", None))]
        with selectors.DefaultSelector() as selector:
            for _, sock in waiting:
                selector.register(sock, selectors.EVENT_READ)
            while waiting:
                still = []
                for pop, sock in waiting:  # (TLS: bytes already decrypted are seen here, not by select)
                    if not self._ready(pop):
                        still.append((pop, sock))
                        continue
                    selector.unregister(sock)
                    if self._read(pop):
                        return True
                waiting = still
                left = until - time.monotonic()
                if not waiting or left <= 0:
                    break
                selector.select(left)
        return False

    @staticmethod
    def _ready(pop: _Pop) -> bool:
        try:
            return bool(pop.conn.can_read(0))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return True  # reading it raises again, and marks it broken

    @staticmethod
    def _read(pop: _Pop) -> bool:
        """Read ``pop``'s reply: True for a token, a redirect or a failure (the claim goes on)."""
        pop.pending = False
        try:
            reply: Any = pop.conn.read_response()
        except (AskError, TryAgainError, ClusterDownError):  # (MovedError is an AskError)
            return True  # the slot is elsewhere: the claim's routing learns where
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            pop.broken = True
            return True
        return reply is not None

    def _end(self, pops: Sequence[_Pop]) -> bool:
        """End the pops still pending and give every connection back: True if one took a token."""
        pending = [pop for pop in pops if pop.pending]
        took = False
        if pending and self._unblocks:
            try:
                took = self._unblock(pending)
            except Exception:
                log.debug("ending blocking pops by CLIENT UNBLOCK failed; closing them", exc_info=True)
        for pop in pops:
            if pop.pending or pop.broken:
                pop.conn.disconnect()  # type: ignore[no-untyped-call]  # ends its pop, nothing unread stays
            pop.conns.give(pop.conn)
        return took

    def _unblock(self, pending: Sequence[_Pop]) -> bool:
        """``CLIENT UNBLOCK`` each of ``pending`` whose id is known, from a free connection of its
        master (every master's sent before any reply is read: one round trip in all), then read its
        reply. True if one had taken a token."""
        groups: dict[int, tuple[Connections, list[_Pop]]] = {}
        for pop in pending:
            known = self._ids.get(pop.conn)
            if known is not None and known[0] is getattr(pop.conn, "_sock", None):
                groups.setdefault(id(pop.conns), (pop.conns, []))[1].append(pop)
        helpers: list[tuple[Connections, AbstractConnection, list[_Pop]]] = []
        try:
            for conns, group in groups.values():
                helper = conns.take()
                helpers.append((conns, helper, group))
                for pop in group:
                    helper.send_command("CLIENT", "UNBLOCK", self._ids[pop.conn][1])  # type: ignore[no-untyped-call]
            took = False
            for _, helper, group in helpers:
                refused = False
                for _ in group:
                    try:
                        helper.read_response()
                    except redis.ResponseError:
                        refused = True
                if refused:  # its pops stay pending: closed by _end
                    if self._unblocks:
                        log.info("CLIENT UNBLOCK refused: a wait over several slots closes the pops it leaves")
                    self._unblocks = False
                    continue
                for pop in group:
                    took = self._read(pop) or took
            return took
        except BaseException:
            for _, helper, _ in helpers:
                helper.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            for conns, helper, _ in helpers:
                conns.give(helper)
