"""The Lua operations, as one Redis Functions library: built from package data, loaded once per server.

Each operation lives in ``lua/<name>.lua`` with a header naming its KEYS, ARGV, return value and
transition; the helpers they share live in ``lua/_<concept>.lua``, one concept a file (:data:`LIBRARY`,
the call's head ``_call.lua`` first). :func:`build_library` puts those first, wraps every operation
in a function and registers it as ``conveyor_<version>_<name>``, where ``<version>`` is a hash of the
whole library text: two Conveyor versions on one server each call their own code, and an upgrade never
runs half-old scripts.

Why Functions rather than ``EVALSHA``: a script runs its whole chunk on every call, so each of the
~50 shared helpers would be built again per call, several times the cost of an empty call; a library's
chunk runs once, at ``FUNCTION LOAD`` (figures: docs/performance-notes.md). Values still reach the code
only through the keys and arguments of the call. The library is loaded with ``FUNCTION LOAD REPLACE``
the first time a call finds it missing (new server, restart without persistence, ``FUNCTION FLUSH``),
then the call is retried once.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from importlib.resources import files
from typing import Any

import redis

from conveyor.brokers.redis.cluster import ClusterCalls
from conveyor.brokers.redis.connections import Arg, Command, Connections

__all__ = [
    "EACH_CALL",
    "ENQUEUES",
    "LIBRARY",
    "NAMESPACE_ONLY",
    "OPERATIONS",
    "READ_ONLY",
    "TOKENED",
    "Arg",
    "Scripts",
    "build_library",
    "is_missing_function",
    "new_token",
    "read_source",
]

#: The helpers every operation shares, ``lua/<name>.lua``, one concept a file, in the order they
#: load: a Lua local is seen only by the code after it, so each file comes after those whose
#: helpers it uses (the call's head and per-call state first).
LIBRARY = ("_call", "_resend", "_rows", "_entries", "_states", "_upkeep")

OPERATIONS = (
    "archive",
    "cancel",
    "claim",
    "clean",
    "configure",
    "delete",
    "enqueue",
    "extend",
    "forget_queue",
    "get",
    "list",
    "promote",
    "purge",
    "reap",
    "release",
    "run_now",
    "settle",
    "stats",
    "take",
    "take_enqueue",
    "upgrade",
    "upgrade_drop",
    "upgrade_slot",
    "withdraw",
)

#: Operations that never write: registered ``no-writes``, so they still answer on a server that is
#: out of memory (the dashboard and ``conveyor stats`` keep working while an operator fixes it).
READ_ONLY = frozenset({"get", "list", "stats"})


#: Operations of the namespace slot alone: ``KEYS[1]`` is its registry (``begin_namespace`` in ``_call.lua``).
#: Every other operation declares its queue slot; only an ``enqueue`` in layout 4, where that slot is
#: the namespace's, may declare the registry too (``KEYS[2]``: unique keys checked in the script, a
#: queue registered in it). With split slots an enqueue's unique keys are claimed by ``take`` first
#: (``claims.py``), the operations that delete tasks free theirs with ``release`` afterwards, and the
#: broker writes the registry around the queue slot's calls: no call declares two slots, but on one
#: server, which checks no slots, ``take_enqueue`` (both steps of such an enqueue in one call).
NAMESPACE_ONLY = frozenset({"release", "take"})


#: Operations whose calls carry a random token (``ARGV[5]``, the same in every send of a call), so that
#: a call sent again after its connection broke mid-reply answers as its first send did: an enqueue
#: rather than meeting its own tasks as duplicates, a settle rather than finding its tasks settled, an
#: operator's action or a withdrawal rather than finding it done (``repeated()`` in ``lua/_resend.lua``).
#: A claim's token is the lease token base it carries anyway (``claim.lua``).
TOKENED = frozenset({"archive", "cancel", "delete", "enqueue", "run_now", "settle", "take", "take_enqueue", "withdraw"})

#: Operations that store new tasks: an enqueue, alone or joined to its take on one server
#: (``take_enqueue``, ``claims.py``): ``replication.py`` raises on a shortfall of replicas after them,
#: and the broker withdraws what they stored.
ENQUEUES = frozenset({"enqueue", "take_enqueue"})


def new_token() -> str:
    """A call's token (:data:`TOKENED`): 64 random bits, from ``os.urandom`` so that a forked child
    never repeats its parent's."""
    return os.urandom(8).hex()


def read_source(name: str) -> str:
    """The text of ``lua/<name>.lua`` as shipped in the package."""
    return files("conveyor.brokers.redis").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


#: The line that ends an operation file's own helpers (optional): the code above it runs once, when
#: the library loads, and only the code below it runs on each call (a function defined in the part
#: that runs per call is built again on every call).
EACH_CALL = "-- each call:\n"


def _operation(name: str) -> str:
    """Operation ``name`` as library code: its helpers in a block of their own, then ``op_<name>``."""
    helpers, marked, body = read_source(name).partition(EACH_CALL)
    if not marked:
        helpers, body = "", helpers
    return f"local op_{name}\ndo\n{helpers}\nop_{name} = function()\n{body}\nend\nend\n"


def build_library() -> tuple[str, str]:
    """``(version, code)``: the library text for ``FUNCTION LOAD`` and the version its names carry."""
    parts = [*(read_source(name) for name in LIBRARY), *(_operation(name) for name in OPERATIONS)]
    body = "\n".join(parts)
    version = hashlib.sha1(body.encode()).hexdigest()[:12]
    registrations = []
    for name in OPERATIONS:
        flags = "{'no-writes'}" if name in READ_ONLY else "{}"
        begin = "begin_namespace" if name in NAMESPACE_ONLY else "begin"
        tokened = "true" if name in TOKENED else "false"
        quiet = ", true" if name in READ_ONLY else ""  # no events: begin() skips reading LISTENING
        registrations.append(
            f"redis.register_function{{function_name = 'conveyor_{version}_{name}', "
            f"callback = function(keys, args) {begin}(keys, args, {tokened}{quiet}) return op_{name}() end, "
            f"flags = {flags}}}"
        )
    code = f"#!lua name=conveyor_{version}\n{body}\n" + "\n".join(registrations) + "\n"
    return version, code


def is_missing_function(exc: BaseException) -> bool:
    """True for the server's answer to an ``FCALL`` of a function it does not have (yet)."""
    return isinstance(exc, redis.ResponseError) and "function not found" in str(exc).lower()


class Scripts:
    """Every operation of the broker, called by name (the library text is built once per process)."""

    def __init__(self) -> None:
        self.version, self.code = build_library()
        self._names = {name: f"conveyor_{self.version}_{name}" for name in OPERATIONS}
        self._lock = threading.Lock()

    def load(self, client: redis.Redis) -> None:
        """``FUNCTION LOAD REPLACE`` the library (idempotent; safe from several processes at once)."""
        with self._lock:
            client.function_load(self.code, replace=True)

    def command(self, name: str, head: Sequence[Arg], args: Sequence[Arg]) -> Command:
        """The ``FCALL`` command for operation ``name``: ``head`` is ``(numkeys, *keys, *argv_head)``."""
        return ("FCALL", self._names[name], *head, *args)

    def call(
        self, conns: Connections | ClusterCalls, client: redis.Redis, call: Command, before: Sequence[Command] = ()
    ) -> tuple[list[Any], Any]:
        """Send ``before`` and then ``call`` (an ``FCALL``) in one write; their replies.

        Loads the library and sends everything again, once, if the server does not have it (a
        command in ``before`` must therefore be harmless to repeat). An error reply of ``call`` or of
        any command in ``before`` is raised.
        """
        replies = conns.execute([*before, call])
        if is_missing_function(replies[-1]):
            self.load(client)
            replies = conns.execute([*before, call])
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        return replies[:-1], replies[-1]

    def call_each(
        self,
        conns: Connections | ClusterCalls,
        client: redis.Redis,
        calls: Iterator[Command],
        handle: Callable[[Any], None],
    ) -> None:
        """Run ``calls`` one after another, each made while the server runs the one before
        (:meth:`Connections.execute_each`); ``handle`` gets each reply, in order. Loads the library
        and sends a call again if the server does not have it; an error reply is raised, and the
        calls after it are not sent."""

        def received(command: Command, reply: Any) -> None:
            reply = self.again_if_missing(conns, client, command, reply)
            if isinstance(reply, redis.ResponseError):
                raise reply
            handle(reply)

        conns.execute_each(calls, received)

    def again_if_missing(
        self, conns: Connections | ClusterCalls, client: redis.Redis, call: Command, reply: Any
    ) -> Any:
        """``reply``, the reply of ``call`` sent apart, or where the server lacked the library the reply
        of ``call`` sent again by :meth:`call` (which loads it first); an error reply as a
        ``redis.ResponseError``, returned."""
        if not is_missing_function(reply):
            return reply
        try:
            return self.call(conns, client, call)[1]
        except redis.ResponseError as exc:
            return exc
