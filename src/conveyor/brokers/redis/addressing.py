"""How a ``RedisBroker`` reaches the server: its client (chosen at the first call, ``link.py``), and
each script call addressed by queue.

A call works in the *queue slot* of the queue (or the task id) it is about, ``Keys.queue_prefix`` /
``Keys.task_prefix``, and declares that slot's ``seq`` as ``KEYS[1]``; an enqueue in layout 4 may also
declare the namespace slot's registry (the same slot there), and the operations of ``NAMESPACE_ONLY``
that alone (see ``lua/_call.lua``). The helpers below group a call's items by slot; in layout 4 every prefix is the
namespace's, so each call stays one (docs/architecture.md, "Redis Cluster: keys per queue").
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import redis

from conveyor.brokers.base import MAX_ERRORS_KEPT
from conveyor.brokers.interrupts import Interrupts
from conveyor.brokers.redis.cancels import CancelWatch
from conveyor.brokers.redis.cluster import ClusterCalls
from conveyor.brokers.redis.codec import decode_events, decode_record
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.connections import Command, Connections
from conveyor.brokers.redis.dues import DueTimes
from conveyor.brokers.redis.events import EventHub
from conveyor.brokers.redis.faults import CLIENT_ERRORS, Refused, failure, translate_errors
from conveyor.brokers.redis.keys import Keys, Keys5, Slot
from conveyor.brokers.redis.link import Link, connect
from conveyor.brokers.redis.listener import follow_now
from conveyor.brokers.redis.replication import ReplicaWait
from conveyor.brokers.redis.scripts import NAMESPACE_ONLY, TOKENED, Arg, Scripts, new_token
from conveyor.brokers.redis.serverclock import ServerClock
from conveyor.brokers.redis.slotwaits import SlotWaits
from conveyor.brokers.redis.upgrade import Upgrade
from conveyor.errors import ConveyorError
from conveyor.model import BrokerPolicy, TaskRecord

__all__ = ["LAYOUT_KEYS", "RedisCalls"]

log = logging.getLogger("conveyor.brokers.redis")

#: Times an enqueue registers its queues and is sent again before it declares the namespace slot
#: instead (each try is refused only when a forget of one of them began or ended meanwhile).
_REGISTER_TRIES = 5

#: The key names a broker uses unless given others: layout 5, a slot per queue (``keys.py``).
LAYOUT_KEYS: type[Keys] = Keys5

_SCRIPTS: Scripts | None = None


def _scripts() -> Scripts:
    global _SCRIPTS
    if _SCRIPTS is None:
        _SCRIPTS = Scripts()
    return _SCRIPTS


class RedisCalls:
    """How a ``RedisBroker`` reaches the server: its client, each script call addressed to its slot."""

    def __init__(self, config: RedisConfig, policy: BrokerPolicy | None = None, keys: Keys | None = None) -> None:
        """``keys``: the key names, layout 5's (:data:`LAYOUT_KEYS`) unless given (the upgrade tests
        give layout 4's, ``Keys``, to write what the version before stored)."""
        self.config = config
        self.policy = policy or BrokerPolicy()
        self.keys = keys or LAYOUT_KEYS(config.namespace)
        self._plain = config.client()  # one server, or a cluster URL's first seed (TIME, INFO)
        self._link: Link | None = None  # the client and the hot path's connections, chosen at first use
        self._link_lock = threading.Lock()
        self._registry = self.keys.queues  # KEYS[2] of the operations that need the namespace slot
        self._policy = (  # ARGV[4]: see lua/_call.lua
            f"{MAX_ERRORS_KEPT} {float(self.policy.archive_retention)!r} {self.policy.max_stalls}"
            f" {math.ceil(config.resend_window * 1000)}"
        )
        self._scripts = _scripts()
        self._origin = secrets.token_hex(8)
        self._events = EventHub(lambda: self._client, self._listened, self._origin, config.socket_connect_timeout)
        self._cancels = CancelWatch(lambda: self._client, self._listened, config.socket_connect_timeout)
        self._clock: ServerClock | None = None
        self._dues = DueTimes()  # when the next idle wait ends at the latest (dues.py)
        self._slot_waits = SlotWaits()  # an idle wait on several slots of a cluster (slotwaits.py)
        self._halts = Interrupts[str]()  # the halt lists of the idle waits in progress (waits.py)
        self._wait = ReplicaWait(config.wait_replicas, config.wait_timeout) if config.wait_replicas else None
        # layout 5: layout 4's data served where it is until moved (upgrade.py)
        self._upgrade = Upgrade(self) if isinstance(self.keys, Keys5) else None

    @property
    def client(self) -> redis.Redis:
        """The underlying redis-py client (for diagnostics and tests; not part of the Broker contract):
        on a cluster, redis-py's ``RedisCluster`` (``cluster.ClusterClient``), which has the same
        command methods."""
        return self._client

    @property
    def cluster(self) -> bool:
        """True when the broker talks to a Redis Cluster (a ``redis+cluster://`` URL, or a node found
        to be one); finding out may take one round trip."""
        return self._client is not self._plain

    @property
    def _client(self) -> redis.Redis:
        link = self._link
        return (link or self._connect()).client

    @property
    def _conns(self) -> Connections | ClusterCalls:
        link = self._link
        return (link or self._connect()).conns

    @property
    def joins_slots(self) -> bool:
        """True when a call over queues of several slots may be one script call: on one server, which
        checks no slots (a cluster refuses a call touching a slot it does not declare)."""
        return not self.cluster

    def _connect(self) -> Link:
        """Choose the client at the first call (``link.py``); raises ``conveyor.errors`` if the server
        cannot be reached, and tries again at the next call."""
        with self._link_lock:
            if self._link is None:
                self._link = connect(self.config, self._plain)
            return self._link

    # -- calling scripts -----------------------------------------------------------------------

    def _call(self, name: str, prefix: str, now: float, *args: Arg) -> Any:
        return self._invoke(name, prefix, repr(float(now)), args)[1]

    def _head(
        self, name: str, prefix: str, now: str, namespace: bool = False, proof: str = "", token: str = ""
    ) -> tuple[Arg, ...]:
        """KEYS (the queue slot's `seq`, then, with ``namespace``, the namespace's registry: layout 4's
        enqueue), then the ARGV head (see lua/_call.lua; ``proof``: an enqueue's registrations, "
        <queue> <forget counter>" pairs, see enqueue.lua), with the call's token for the operations
        of ``TOKENED`` (``token``, or a new one)."""
        events = ("1" if self._events.active else "0") + proof
        if name in NAMESPACE_ONLY:
            head: tuple[Arg, ...] = (1, self._registry, now, self._origin, "0", self._policy)
        elif namespace:
            head = (2, prefix + "seq", self._registry, now, self._origin, events, self._policy)
        else:
            head = (1, prefix + "seq", now, self._origin, events, self._policy)
        return (*head, token or new_token()) if name in TOKENED else head

    def _invoke(
        self,
        name: str,
        prefix: str,
        now: str,
        args: Sequence[Arg],
        before: Sequence[Command] = (),
        namespace: bool = False,
        proof: str = "",
        token: str = "",
    ) -> tuple[list[Any], Any, float]:
        """Run operation ``name`` in the queue slot ``prefix`` (after the commands ``before``, in the
        same write): their replies, its result, and the ``now`` it ran at (``now`` "" asks for the
        server's TIME). ``namespace``: whether to declare the namespace slot too (layout 4's enqueue);
        ``proof`` and ``token``: see :meth:`_head`."""
        try:  # inline rather than `with translate_errors()`: this is every operation's hot path
            command = self._scripts.command(name, self._head(name, prefix, now, namespace, proof, token), args)
            conns = self._conns
            if self._wait is not None and self._wait.applies(name):  # see replication.py
                early, reply = self._wait.call(self._scripts, conns, self._client, name, command, before)
            else:
                early, reply = self._scripts.call(conns, self._client, command, before)
        except CLIENT_ERRORS as exc:
            raise failure(exc) from exc
        return (early, *self._result(reply))

    def _invoke_each(
        self,
        name: str,
        prefix: str,
        now: str,
        calls: Iterable[Sequence[Arg]],
        handle: Callable[[Any], None],
        namespace: bool = False,
    ) -> None:
        """Run operation ``name`` in the queue slot ``prefix`` (and the namespace slot, see
        :meth:`_invoke`) once per argument list in ``calls``, one call after another, each made while
        the server runs the one before; ``handle`` gets each result, in order."""
        commands = (self._scripts.command(name, self._head(name, prefix, now, namespace), args) for args in calls)
        try:
            self._scripts.call_each(self._conns, self._client, commands, lambda reply: handle(self._result(reply)[0]))
        except CLIENT_ERRORS as exc:
            raise failure(exc) from exc

    def _result(self, reply: Any) -> tuple[Any, float]:
        """An operation's result and the ``now`` it ran at, from its reply (events go to subscribers)."""
        if isinstance(reply, str):  # now + "\n" + a string result: see lua/_call.lua
            now, _, result = reply.partition("\n")
            return result, float(now)
        ran_at = float(reply[1])
        if len(reply) > 2:  # {result, now, events} or {result, now, events or "", freed}
            if reply[2]:
                self._events.deliver(decode_events(reply[2], ran_at))
            if len(reply) > 3:
                self._release(reply[3], ran_at)
        return reply[0], ran_at

    def _release(self, freed: str, now: float) -> None:
        """Free in the namespace slot the index entries of tasks a call deleted in their queue slot
        (``freed``: lines ``"u <unique key> <id>"`` or ``"i <custom id> <label>"``, see ``release.lua``).
        Their tasks are gone either way: a failure here leaves entries whose task is gone, which an
        enqueue treats as free, so it is logged rather than raised."""
        args: list[Arg] = []
        for line in freed.split("\n"):
            args += line.split(" ")
        try:
            self._invoke("release", self.keys.namespace_prefix, repr(float(now)), args)
        except ConveyorError:
            log.warning("index entries of deleted tasks left in place (harmless): %s", freed, exc_info=True)

    def _records(self, items: Sequence[Any]) -> list[TaskRecord]:
        records = []
        for item in items:
            try:
                record = decode_record(item)
            except (ValueError, KeyError, TypeError, IndexError):
                log.exception("skipping a task that cannot be decoded: %r", item)
                continue
            if record is not None:
                records.append(record)
        return records

    # -- addressing slots ------------------------------------------------------------------------

    def _by_slot(self, items: Sequence[Any], prefix_of: Callable[[Any], str]) -> list[tuple[str, list[int]]]:
        """The places of ``items`` grouped by the slot ``prefix_of`` gives each, in order of first place."""
        groups: dict[str, list[int]] = {}
        for place, item in enumerate(items):
            groups.setdefault(prefix_of(item), []).append(place)
        return list(groups.items())

    def _runs(self, queues: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
        """``queues`` cut into runs of neighbours in one slot (their order is the claim order)."""
        run: list[str] = []
        prefix = ""
        for queue in queues:
            this = self.keys.queue_prefix(queue)
            if run and this != prefix:
                yield prefix, run
                run = []
            prefix = this
            run.append(queue)
        if run:
            yield prefix, run

    def _joined(self, groups: Sequence[tuple[str, Sequence[Arg]]]) -> list[tuple[str, list[Arg]]]:
        """A call's per-slot ``(prefix, args)`` groups as the calls to make: one per slot on a cluster;
        on one server, which checks no slots, one, each slot after the first named by its ``seq`` key
        before its own arguments (``switch()`` in ``lua/_call.lua``), so the standalone path makes the
        calls it made in layout 4."""
        if len(groups) < 2 or not self.joins_slots:
            return [(prefix, list(args)) for prefix, args in groups]
        joined = list(groups[0][1])
        for prefix, args in groups[1:]:
            joined += [prefix + "seq", *args]
        return [(groups[0][0], joined)]

    def _task_prefixes(self, task_ids: Sequence[str]) -> list[str]:
        """The prefixes of the slots of the tasks ``task_ids``: layout 4's one slot; else the label in
        a generated id, or for a custom id the label its entry in the namespace slot's ``ids`` names
        (one round trip for all of them; without an entry, the namespace slot, where no task is)."""
        keys = self.keys
        if keys.one_slot:
            return [keys.prefix] * len(task_ids)
        prefixes = [keys.task_prefix(task_id) for task_id in task_ids]
        custom = [place for place, task_id in enumerate(task_ids) if "~" not in task_id]
        if custom:
            with translate_errors():  # on the broker's own connections, as its scripts (a cluster's too)
                [entries] = self._conns.execute([("HMGET", keys.ids, *(task_ids[place] for place in custom))])
                if isinstance(entries, redis.ResponseError):
                    raise entries
                unlisted = self._old_prefix() or keys.namespace_prefix  # no task at the namespace's
            for place, entry in zip(custom, entries, strict=True):
                prefixes[place] = unlisted if entry is None else keys.label_prefix(entry.split(" ")[0])
        return prefixes

    def _by_task_slot(self, task_ids: Sequence[str], run: Callable[[str, list[int]], list[bool]]) -> list[bool]:
        """``run(prefix, places)`` for the places of ``task_ids`` in each slot (:meth:`_task_prefixes`):
        its flag per place. While layout 4 holds data, places not applied go once more
        (:meth:`_elsewhere`)."""
        applied = [False] * len(task_ids)
        places = list(range(len(task_ids)))
        prefixes = self._task_prefixes(task_ids)
        for last in (False, True):
            for prefix, group in self._by_slot(places, dict(zip(places, prefixes, strict=True)).__getitem__):
                for i, flag in zip(group, run(prefix, [places[i] for i in group]), strict=True):
                    applied[places[i]] = flag
            sent = [(i, prefix) for i, prefix in zip(places, prefixes, strict=True) if not applied[i]]
            if last or not sent:
                break
            again = self._elsewhere([task_ids[i] for i, _ in sent], [prefix for _, prefix in sent])
            places = [i for (i, _), prefix in zip(sent, again, strict=True) if prefix is not None]
            prefixes = [prefix for prefix in again if prefix is not None]
            if not places:
                break
        return applied

    def _elsewhere(self, task_ids: Sequence[str], sent: Sequence[str]) -> list[str | None]:
        """Where to send once more by-id calls of ``task_ids`` not applied in the slots ``sent`` (None:
        nowhere), while layout 4 holds data (``upgrade.py``): one sent to its slot goes by its entry, as
        the move may have taken the task meanwhile; one of a custom id sent by its entry goes to layout
        4's slot, which may hold a second task of that id, enqueued by a producer of the version before
        (which cannot see layout 5's entries) and claimed there; the move drops it later."""
        old = self._old()
        if old is None:
            return [None] * len(task_ids)
        back = [task_id for task_id, prefix in zip(task_ids, sent, strict=True) if prefix == old]
        entries = iter(self._task_prefixes(back) if back else [])
        out: list[str | None] = []
        for task_id, prefix in zip(task_ids, sent, strict=True):
            if prefix == old:
                entry = next(entries)
                out.append(None if entry == old else entry)  # still no entry: not moved
            else:
                out.append(old if "~" not in task_id else None)
        return out

    def _old(self) -> str | None:
        """:meth:`_old_prefix`, its errors as ``conveyor.errors``."""
        if self._upgrade is None:
            return None
        with translate_errors():
            return self._old_prefix()

    def _old_prefix(self) -> str | None:
        """Layout 4's slot while it holds data a layout-5 broker serves in place (``upgrade.py``), else
        None (raises redis-py's errors as they come)."""
        upgrade = self._upgrade
        return upgrade.prefix if upgrade is not None and upgrade.present() else None

    def _task_prefix(self, task_id: str) -> str:
        """The prefix of the slot of the task ``task_id`` (:meth:`_task_prefixes`)."""
        return self.keys.prefix if self.keys.one_slot else self._task_prefixes([task_id])[0]

    def _registered(self) -> list[str]:
        """Every queue of the registry (the namespace slot's ``queues``), sorted."""
        with translate_errors():
            return sorted(cast("set[str]", self._client.smembers(self.keys.queues)))

    def _slots(self) -> list[str]:
        """The prefixes of every slot that holds queues (layout 4: the one slot, without a round trip)."""
        with translate_errors():
            return self._slots_now()

    def _slots_now(self) -> list[str]:
        """:meth:`_slots` with redis-py's errors as they come (the listeners reconnect on them)."""
        if self.keys.one_slot:
            return [self.keys.prefix]
        queues = cast("set[str]", self._client.smembers(self.keys.queues))
        old = self._old_prefix()
        return self._slots_of(queues) + ([old] if old else [])

    def _slots_of(self, queues: Iterable[str]) -> list[str]:
        """The prefixes of the slots that hold the tasks of ``queues``, sorted."""
        return sorted({self.keys.queue_prefix(queue) for queue in queues})

    def _listened(self) -> list[Slot]:
        """The queue slots whose channels the event and cancel listeners follow (``listener.py``)."""
        return [self.keys.slot(prefix) for prefix in self._slots_now()]

    # -- the registry, written around the queue slot's calls ------------------------------------

    def _enqueue_here(
        self, prefix: str, now: str, args: Sequence[Arg], token: str, take: Sequence[Arg] = ()
    ) -> str | None:
        """An enqueue call in its queue slot alone: its reply, or None when it needs the namespace slot
        declared too (layout 4), or could not register its queues in :data:`_REGISTER_TRIES` tries. A
        queue not registered yet (a refusal naming queues and their forget counters) is added to the
        registry first, then the call is sent again with the counters (enqueue.lua: register); in
        layout 4, where the slots are one, the call is sent again with both instead. ``token``: the
        call's, the same in each send (see :meth:`_head`). ``take``: ``take_enqueue.lua``'s arguments
        before enqueue's (``claims._joined_args``), on one server, to take the entries in the same call
        (``take_enqueue.lua``, which declares both slots)."""
        proof = ""
        name, joined = ("take_enqueue", (*take, *args)) if take else ("enqueue", args)
        for _ in range(_REGISTER_TRIES):
            try:
                reply = self._invoke(name, prefix, now, joined, namespace=bool(take), proof=proof, token=token)[1]
                return cast("str", reply)
            except Refused as exc:
                named = exc.text.split(" ")
                if named[0] != "CONVEYOR_NAMESPACE":
                    raise
                if self.keys.one_slot:
                    return None
                queues = named[1::2]
                self._register(*queues)
                proof = "".join(f" {queue} {count}" for queue, count in zip(queues, named[2::2], strict=True))
        return None

    def _forget_mark(self, queue: str, prefix: str | None = None) -> int | str | None:
        """The first step, in the queue's slot (or ``prefix``, a partition's): None (no such queue),
        the number of tasks it holds, or the marker."""
        with translate_errors():
            listed = bool(self._client.sismember(self.keys.queues, queue))
        prefix, bound = prefix or self.keys.queue_prefix(queue), repr(2 * self.config.socket_timeout)
        answer = str(self._invoke("forget_queue", prefix, "", (queue, "mark", "1" if listed else "0", bound))[1])
        if answer == "unknown":
            return None
        if answer.startswith("marked "):
            return answer.removeprefix("marked ")
        return int(answer)

    def _forget_finish(self, queue: str, marker: str, prefix: str | None = None) -> None:
        """The last step: the mark taken away, the queue listed again if it came back meanwhile."""
        prefix = prefix or self.keys.queue_prefix(queue)
        answer = str(self._invoke("forget_queue", prefix, "", (queue, "finish", marker))[1])
        if answer == "again":
            self._register(queue)

    def _register(self, *queues: str) -> None:
        """List ``queues`` in the registry; with a slot per queue, this process's listeners then follow
        their slots before the call goes on, so none of their events or cancels is missed here (other
        processes' listeners follow them at their next refresh, ``listener.REFRESH``)."""
        with translate_errors():
            self._client.sadd(self.keys.queues, *queues)
        if not self.keys.one_slot:
            follow_now((self._events.listener, self._cancels.listener), self.config.socket_connect_timeout)

    def _unregister(self, queue: str) -> None:
        with translate_errors():
            self._client.srem(self.keys.queues, queue)
