"""Every Redis key the broker uses, built in one place.

All keys of a namespace share the hash tag ``{<namespace>}``, so every Lua script touches one hash
slot (Redis Cluster safe) and stays atomic. Why one tag per *namespace* rather than per queue: the
``Broker`` contract addresses tasks by id alone (``get``, ``settle``, ``extend``, admin calls) and makes
task ids and unique keys unique across queues, checked atomically by ``enqueue``. With a tag per queue,
that check would span slots (no longer one atomic script) and every by-id call would need an extra
round trip to an id→queue index. A namespace is therefore the unit of sharding: tenants or apps on
one cluster get their own namespaces, which spread over the nodes. Layout 5 (:class:`Keys5`,
docs/architecture.md) gives each queue a slot of its own, ``{ns|label}:v5:``, with the same names
after the prefix; every script call is addressed by queue (:meth:`Keys.queue_prefix`,
:meth:`Keys.task_prefix`), all of them ``{ns}:v4:`` in layout 4, which is what runs.

Layout (``P`` = ``{ns}:v4:``; ``v4`` is the layout's version: the per-task hashes of layout 1 lived
under ``{ns}:``, layout 2 kept bodies apart from rows under ``{ns}:v2:``, layout 3 a ``waiting`` member
per pending task (no groups) under ``{ns}:v3:``, so an upgrade runs side by side, each version's
workers on their own keys, and nothing of the other layout is read, changed or deleted (keep a
worker of the earlier version running until its queues are drained); a task's *member*
is ``%016d(seq) + id``: equal scores order by member, i.e. by enqueue sequence, which gives the exact
tie-break of the contract without packing two numbers into one double)::

    P rows                   hash    id → the task: its fields, then its body (see ``codec.py``)
    P results                hash    id → result, for a task completed with one
    P lasterr                hash    id → last error, while the task has one
    P limits                 hash    id → the retry limit its latest failed execution ran with
    P tracebacks             hash    id → the traceback of its latest failed execution, if it had one
    P e:<id>                 list    the task's latest failures, "attempt\\tat\\terror"
    P q:<queue>:pending      zset    member by ready_key (the claim order)
    P q:<queue>:waiting      zset    member by ready_at (oldest pending); tasks that one call enqueued
                                     together wait as one member, "g" + ready_at (see ``lua/_rows.lua``)
    P q:<queue>:groups       hash    "g" + ready_at → how many of the group's tasks are pending
    P q:<queue>:scheduled    zset    member by next_run_at (likewise retry)
    P q:<queue>:active       zset    member by started_at
    P q:<queue>:completed    zset    member by finished_at (likewise archived)
    P q:<queue>:completed:keep zset  member by keep_until (likewise archived:keep)
    P qs:<queue>             hash    queue settings: ms (max_size), cc (concurrency), ag (aging), pa (paused),
                                     kn ("1": the queue is in ``queues``; enqueues skip the SADD)
    P due  P leases  P expiring   zsets over all queues: next_run_at, lease deadline, expires_at
    P seq  P queues  P uniq       enqueue counter, known queue names, unique_key → holder id (with
                                  split slots "<id> <since>", ``claims.py``)
    P ids                    hash    with split slots only: custom id → "<label> <since>" (``claims.py``)
    P parts                  hash    partitioned queues: queue → "<N> <max_size> <concurrency>", and
                                     "<queue> <label>" → when that partition was retired (``partitions.py``)
    P workers  P wttl             worker info (JSON) by id, and heartbeat deadlines
    P h:<minute>             hash    settled executions of that minute (``floor(now / 60)``), field
                                     ``<c|r|a>:<queue>`` → count (completed, retried, archived); expires
                                     a little after the 24 h that reads reach (``conveyor.history``)
    P declared               hash    task name → its declaration (JSON, ``conveyor.declared``)
    P events                      shard channel of transitions
    P cancels                     shard channel: the id of each active task ``cancel`` archived
    P wake                        list of at most one token: "tasks became pending" (BLPOP by idle workers)
    P halt:<origin>:<n>      list    one idle wait's own: a token ends its pop (``InterruptsWaits``);
                                     expires a minute after the push, if that wait had ended
    P sent:<token>           string  an enqueue's (or a take's) answer, for a repeat of that call: a
                                     call sent again after a lost reply answers as it did (expires
                                     after ``RedisConfig.resend_window``, about a minute)
    P listening                   string with a TTL: some process listens on ``events`` (scripts skip
                                  making events otherwise); event listeners refresh it
    (``events``, ``cancels``, ``wake`` and ``listening`` are each queue slot's: with a slot per queue,
    listeners subscribe to every registered queue's channels and keep its ``listening`` key)
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass

from conveyor.errors import ConfigurationError
from conveyor.ids import LABEL_MAX, queue_label

__all__ = [
    "LABEL_MAX",
    "LAYOUT",
    "LAYOUT5",
    "NAMESPACE_RE",
    "SLOTS",
    "Keys",
    "Keys5",
    "Slot",
    "keyslot",
    "partition_labels",
    "queue_label",
]

#: The storage layout's version, part of every key (see above).
LAYOUT = "v4"

#: Layout 5's version (:class:`Keys5`): a slot per queue (docs/architecture.md).
LAYOUT5 = "v5"

#: A namespace's name: never ``|`` nor ``}``, which would end its hash tag or its queues' (``{ns|label}``)
#: early and break the ACL patterns that hold a namespace's keys (``faults.NEEDED_ACL``).
NAMESPACE_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")

#: The hash slots of a Redis Cluster.
SLOTS = 16384


def keyslot(key: str) -> int:
    """The Redis Cluster slot of ``key``: CRC16 (XMODEM) of its hash tag (the text between the first
    ``{`` and the next ``}``, if not empty) or of the whole key, modulo :data:`SLOTS`."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % SLOTS


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def partition_labels(namespace: str, label: str, partitions: int) -> list[str]:
    """The hash-tag labels of a queue's ``partitions`` partitions (layout 5, see docs/architecture.md):
    ``label`` for one, else ``label|<suffix>`` with, for partition n, the first suffix (0, 1, ... in
    base 36) whose tag ``{namespace|label|suffix}`` falls in the n-th of ``partitions`` equal windows
    of the slots, so the partitions sit evenly spaced over the slot range (and over masters owning
    equal ranges). A pure function of its arguments, so every process finds the same labels."""
    if partitions < 1 or partitions > SLOTS:
        raise ConfigurationError(f"partitions must be between 1 and {SLOTS}, got {partitions}")
    if partitions == 1:
        return [label]
    labels = []
    for n in range(partitions):
        low, high = n * SLOTS // partitions, (n + 1) * SLOTS // partitions
        candidate = 0
        while True:
            suffix, rest = "", candidate
            while True:
                rest, digit = divmod(rest, 36)
                suffix = _DIGITS[digit] + suffix
                if not rest:
                    break
            found = f"{label}|{suffix}"
            if low <= keyslot("{" + namespace + "|" + found + "}") < high:
                labels.append(found)
                break
            candidate += 1
    return labels


class _SlotNames:
    """The names of a queue slot's keys after its ``prefix``, shared by :class:`Slot` (any queue slot)
    and :class:`Keys` (layout 4's one slot)."""

    __slots__ = ()

    @property
    def prefix(self) -> str:
        raise NotImplementedError

    @property
    def rows(self) -> str:
        return self.prefix + "rows"

    @property
    def results(self) -> str:
        return self.prefix + "results"

    @property
    def lasterr(self) -> str:
        return self.prefix + "lasterr"

    @property
    def limits(self) -> str:
        return self.prefix + "limits"

    @property
    def tracebacks(self) -> str:
        return self.prefix + "tracebacks"

    def errors(self, task_id: str) -> str:
        return f"{self.prefix}e:{task_id}"

    def queue(self, queue: str, part: str) -> str:
        """A per-queue index: ``part`` is a state name, ``waiting``, or ``completed:keep``/``archived:keep``."""
        return f"{self.prefix}q:{queue}:{part}"

    def settings(self, queue: str) -> str:
        return f"{self.prefix}qs:{queue}"

    def history(self, minute: int) -> str:
        return f"{self.prefix}h:{minute}"

    def sent(self, token: str) -> str:
        """The answer kept for a repeat of the call ``token`` (``scripts.TOKENED``; ``repeated()`` in
        ``lua/_resend.lua``): in the slot the call works in, for the config's ``resend_window``."""
        return f"{self.prefix}sent:{token}"

    @property
    def events(self) -> str:
        """The slot's shard channel of transitions (listeners subscribe to each queue slot's)."""
        return self.prefix + "events"

    @property
    def cancels(self) -> str:
        """The slot's shard channel of the ids of its running tasks that ``cancel`` archived."""
        return self.prefix + "cancels"

    @property
    def listening(self) -> str:
        """Exists while some process listens on the slot's ``events`` (scripts skip events otherwise)."""
        return self.prefix + "listening"

    @property
    def due(self) -> str:
        return self.prefix + "due"

    @property
    def leases(self) -> str:
        return self.prefix + "leases"

    @property
    def expiring(self) -> str:
        return self.prefix + "expiring"

    @property
    def seq(self) -> str:
        return self.prefix + "seq"

    @property
    def wake(self) -> str:
        return self.prefix + "wake"

    def halt(self, name: str) -> str:
        """The list an idle wait's pop names beside ``wake``, which an interrupt pushes to (``waits.py``)."""
        return f"{self.prefix}halt:{name}"


@dataclass(frozen=True, slots=True)
class Slot(_SlotNames):
    """The keys of one *queue slot*: everything of the tasks of the queues whose keys start with
    ``prefix`` (layout 4: every queue of the namespace, ``{ns}:v4:``; layout 5: one queue or
    partition, ``{ns|label}:v5:``, see docs/architecture.md). A script call touches the keys of one
    queue slot (in layout 4 an enqueue also the namespace slot's registry and unique keys, the same
    slot there), or those of the namespace slot alone (``scripts.NAMESPACE_ONLY``)."""

    prefix: str

    @property
    def declared(self) -> str:
        """The key a call on this slot declares first (``KEYS[1]``, see ``lua/_call.lua``): ``seq``."""
        return self.prefix + "seq"


@dataclass(frozen=True, slots=True)
class Keys(_SlotNames):
    """Key names of one namespace.

    Every call is addressed by queue: :meth:`queue_prefix` (by queue name) and :meth:`task_prefix` (by
    task id) give the prefix of the queue slot a call works in, :attr:`namespace_prefix` the
    namespace slot's (the queue registry, unique keys, workers, declarations). In layout 4 all three
    are :attr:`prefix`, so :attr:`one_slot` holds and a call may span queues; the properties below
    name layout 4's keys. Tests give a subclass whose prefixes differ, to check that every script
    stays in the slots it is told.
    """

    namespace: str

    def __post_init__(self) -> None:
        if not NAMESPACE_RE.fullmatch(self.namespace):
            raise ConfigurationError(f"namespace must match [A-Za-z0-9._:-]{{1,64}}, got {self.namespace!r}")

    @property
    def prefix(self) -> str:
        """``{ns}:v4:``: the start of every key, hash tag and layout version included."""
        return "{" + self.namespace + "}:" + LAYOUT + ":"

    @property
    def namespace_prefix(self) -> str:
        """The namespace slot's prefix; its declared key is :attr:`queues` (``KEYS[2]``)."""
        return self.prefix

    @property
    def one_slot(self) -> bool:
        """True when every queue and task of the namespace is in one slot with the namespace's own
        keys (layout 4): calls over several queues stay one call."""
        return True

    def queue_prefix(self, queue: str) -> str:
        """The prefix of the slot that holds ``queue``'s tasks."""
        return self.prefix

    def task_prefix(self, task_id: str) -> str:
        """The prefix of the slot that holds the task ``task_id`` (layout 5: the label in its id)."""
        return self.prefix

    def label_prefix(self, label: str) -> str:
        """The prefix of the slot of the queues labelled ``label`` (:func:`queue_label`)."""
        return self.prefix

    def id_suffix(self, queue: str) -> str:
        """What a generated id of ``queue`` ends with where ids route by label (not :attr:`one_slot`):
        ``~`` and the queue's label, so by-id calls find its slot (:meth:`task_prefix`)."""
        return "~" + queue_label(queue)

    def slot(self, prefix: str) -> Slot:
        return Slot(prefix)

    @property
    def queues(self) -> str:
        return self.prefix + "queues"

    @property
    def uniq(self) -> str:
        return self.prefix + "uniq"

    @property
    def ids(self) -> str:
        """Hash: custom id -> ``"<label> <since>"``, the slot its task is in (split slots only)."""
        return self.prefix + "ids"

    @property
    def workers(self) -> str:
        return self.prefix + "workers"

    @property
    def declared(self) -> str:
        return self.prefix + "declared"

    @property
    def worker_ttl(self) -> str:
        return self.prefix + "wttl"

    @property
    def worker_commands(self) -> str:
        """Hash: worker id -> ``command`` and its expiry, as ``"<until> <command>"``."""
        return self.prefix + "wcmd"


@dataclass(frozen=True, slots=True)
class Keys5(Keys):
    """Layout 5's key names (docs/architecture.md, "Redis Cluster: keys per queue"): the namespace
    slot ``{ns}:v5:`` holds what belongs to no queue (:attr:`queues`, :attr:`uniq`, :attr:`ids`, the
    workers, the declarations), and each queue its own slot ``{ns|label}:v5:`` (:func:`queue_label`)
    with its tasks and every index of them. A generated id ends in ``~<label>`` and routes by it; a
    custom id through its entry in :attr:`ids`. Not :attr:`one_slot`: a call stays in one slot, except
    where the broker knows it talks to one server, which checks no slots (``RedisCalls.one_server``).
    """

    @property
    def prefix(self) -> str:
        """``{ns}:v5:``: the namespace slot's prefix (no queue's task is under it)."""
        return "{" + self.namespace + "}:" + LAYOUT5 + ":"

    @property
    def one_slot(self) -> bool:
        return False

    def queue_prefix(self, queue: str) -> str:
        return self.label_prefix(queue_label(queue))

    def label_prefix(self, label: str) -> str:
        return "{" + self.namespace + "|" + label + "}:" + LAYOUT5 + ":"

    def task_prefix(self, task_id: str) -> str:
        """The slot of the label after the id's last ``~`` (a custom id without one has its slot in
        :attr:`ids`: ``RedisCalls._task_prefixes``)."""
        return self.label_prefix(task_id.rpartition("~")[2])
