"""The Lua scripts: read from package data once, run by SHA, reloaded when the server lost them.

Each operation lives in ``lua/<name>.lua`` with a header naming its KEYS, ARGV, return value and
transition; ``lua/_lib.lua`` (shared helpers, no values) is put in front of each. Values reach a script
only through KEYS and ARGV. Scripts are sent with EVALSHA; on ``NOSCRIPT`` (server restarted, or
``SCRIPT FLUSH``) every script is loaded again and the call retried once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import redis
from redis.exceptions import NoScriptError

__all__ = ["OPERATIONS", "Script", "Scripts", "read_source"]

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
            source = f"{lib}\n{read_source(name)}"
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

    def call(self, client: redis.Redis, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """EVALSHA one script, loading the scripts once if the server does not know it."""
        script = self._scripts[name]
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.load_all(client)
            return client.evalsha(script.sha, len(keys), *keys, *args)

    def call_many(self, client: redis.Redis, calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]) -> list[Any]:
        """Several EVALSHA in one pipelined round trip (not one transaction); errors are raised."""
        results = self._pipelined(client, calls)
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # a NOSCRIPT reply means that call did not run: load and redo those only
            self.load_all(client)
            again = self._pipelined(client, [calls[i] for i in missing])
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    def _pipelined(self, client: redis.Redis, calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for name, keys, args in calls:
            pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
        return list(pipe.execute(raise_on_error=False))
