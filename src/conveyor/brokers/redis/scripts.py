"""The Lua scripts: read from package data once, run by SHA, reloaded when the server lost them.

Each operation lives in ``lua/<name>.lua`` with a header naming its KEYS, ARGV, return value and
transition; ``lua/_lib.lua`` (shared helpers, no values) is put in front of each: only the helper
functions the operation uses, directly or through other helpers (see :func:`prelude`), since Lua
builds every ``local function`` of a script on each call (~0.5 µs each here). Values reach a script
only through KEYS and ARGV. Scripts are sent with EVALSHA; on ``NOSCRIPT`` (server restarted, or
``SCRIPT FLUSH``) every script is loaded again and the call retried once.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, cast

import redis
from redis.exceptions import NoScriptError

_pack_command: Callable[[tuple[str | int | float, ...]], bytes] | None
try:  # the C packer redis-py itself uses when hiredis is installed, without its per-argument Python loop
    import hiredis

    _pack_command = cast("Callable[[tuple[str | int | float, ...]], bytes]", hiredis.pack_command)
except ImportError:  # pragma: no cover - hiredis is a dependency of the redis extra
    _pack_command = None

__all__ = ["OPERATIONS", "Script", "Scripts", "prelude", "read_source"]

OPERATIONS = (
    "archive",
    "cancel",
    "claim",
    "clean",
    "configure",
    "delete",
    "enqueue",
    "extend",
    "list",
    "promote",
    "purge",
    "reap",
    "run_now",
    "settle",
    "stats",
)

Arg = str | int | float


def read_source(name: str) -> str:
    """The text of ``lua/<name>.lua`` as shipped in the package."""
    return files("conveyor.brokers.redis").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


_FUNCTION = re.compile(r"^local function (\w+)", re.MULTILINE)


def prelude(lib: str, body: str) -> str:
    """The part of ``lib`` that ``body`` needs: everything but the ``local function``s it never uses.

    ``lib`` is cut into blocks at each top-level ``local function NAME`` (a block ends where the next
    top-level ``local`` starts; the comment lines above a definition go with it). A function block is
    kept when its name occurs, as a word, in ``body`` or in a kept block; every other line is kept.
    The order of ``lib`` is unchanged, so definitions still precede their uses.
    """
    blocks: list[tuple[str | None, str]] = []  # (function name or None, text)
    current: list[str] = []
    comments: list[str] = []
    name: str | None = None
    for line in lib.splitlines(keepends=True):
        if line.startswith("--"):
            comments.append(line)
            continue
        if line.startswith("local "):
            blocks.append((name, "".join(current)))
            match = _FUNCTION.match(line)
            name = match.group(1) if match else None
            current = [*comments, line]
        else:
            current.extend([*comments, line])
        comments = []
    blocks.append((name, "".join(current) + "".join(comments)))
    needed = set(re.findall(r"\w+", body))
    kept = [False] * len(blocks)
    changed = True
    while changed:
        changed = False
        for i, (fn, text) in enumerate(blocks):
            if not kept[i] and (fn is None or fn in needed):
                kept[i] = changed = True
                needed.update(re.findall(r"\w+", text))
    return "".join(text for (_, text), keep in zip(blocks, kept, strict=True) if keep)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


class Scripts:
    """All operation scripts of the broker (sources read once per process)."""

    def __init__(self) -> None:
        lib = read_source("_lib")
        self._scripts: dict[str, Script] = {}
        for name in OPERATIONS:
            body = read_source(name)
            source = f"{prelude(lib, body)}\n{body}"
            self._scripts[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest())
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Script:
        return self._scripts[name]

    def load_all(self, client: redis.Redis) -> None:
        """SCRIPT LOAD every script (after a NOSCRIPT)."""
        with self._lock:
            pipe = client.pipeline(transaction=False)
            for script in self._scripts.values():
                pipe.script_load(script.source)
            pipe.execute()

    def call(self, client: redis.Redis, name: str, head: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """EVALSHA one script, loading the scripts once if the server does not know it.

        ``head`` is ``(numkeys, *keys, *argv_head)``, ``args`` the rest of ARGV.
        """
        command = ("EVALSHA", self._scripts[name].sha, *head, *args)
        try:
            return _execute(client, command)
        except NoScriptError:
            self.load_all(client)
            return _execute(client, command)


def _execute(client: redis.Redis, command: tuple[Arg, ...]) -> Any:
    """``client.execute_command(*command)`` (no response callback), with less per-call overhead.

    Same connection handling as redis-py: a pooled connection, the client's ``Retry`` on connection
    errors (disconnecting before each retry), the connection's health checks. Without hiredis, it
    is ``execute_command`` itself.
    """
    if _pack_command is None:  # pragma: no cover
        return client.execute_command(*command)  # type: ignore[no-untyped-call]
    packed = [_pack_command(command)]
    pool = client.connection_pool
    conn = pool.get_connection()

    def roundtrip() -> Any:
        conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
        return conn.read_response()

    try:
        return conn.retry.call_with_retry(roundtrip, lambda _error: conn.disconnect())  # type: ignore[no-untyped-call]
    finally:
        pool.release(conn)
