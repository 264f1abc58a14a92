"""The online move from layout 4 (``{ns}:v4:``, one slot) to layout 5 (a slot per queue), for a broker
on layout 5's keys (docs/architecture.md, "From layout 4").

While layout 4's registry ``{ns}:v4:queues`` exists, its data is served where it is: a by-id call whose
id has no entry in layout 5's ``ids`` goes to layout 4's slot (every layout 4 id lacks ``~<label>``),
claims, promote, reap and history visit it after layout 5's slots, stats add its counts, and the
listeners follow its channels. Layout 4's slot has the same key names after its prefix as a queue
slot of layout 5, so every script runs there unchanged. The janitor's tick moves its tasks
(``upgrade.lua``), :data:`BATCH` per call, each task whole or not at all, for at most
:data:`TICK_BUDGET` seconds a tick; the call that empties it carries the queues' settings and the task
declarations over and deletes the rest, its registry last.

One server only: a cluster cannot run a call over two slots, and its copy-then-drop move is not built,
so there the data of layout 4 is served in place and never moved (a warning says so once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from conveyor.brokers.redis.keys import Keys

if TYPE_CHECKING:
    from conveyor.brokers.redis.addressing import RedisCalls

__all__ = ["BATCH", "RECHECK", "TICK_BUDGET", "Upgrade", "merged_stats"]

log = logging.getLogger("conveyor.brokers.redis")

#: Tasks moved per call at most: one call holds the server for ~1 ms per 100 tasks.
BATCH = 500

#: Seconds of moving per janitor tick at most (each call is short; other calls run between them).
TICK_BUDGET = 1.0

#: Seconds a "layout 4 holds data" answer is trusted before it is read again.
RECHECK = 2.0


class Upgrade:
    """Whether layout 4 still holds data in the namespace, and the mover that empties it."""

    def __init__(self, calls: RedisCalls) -> None:
        self._calls = calls
        self.old = Keys(calls.keys.namespace)
        self._present = False
        self._read_at = float("-inf")
        self._cursor = "0"
        self._warned = False

    @property
    def prefix(self) -> str:
        """Layout 4's one slot, ``{ns}:v4:``."""
        return self.old.prefix

    def present(self) -> bool:
        """True while layout 4's registry exists (read at most every :data:`RECHECK` s; raises
        redis-py's errors as they come)."""
        now = time.monotonic()
        if now - self._read_at >= RECHECK:
            self._present = bool(self._calls.client.exists(self.old.queues))
            self._read_at = now
        return self._present

    def step(self, now: float, budget: float = TICK_BUDGET, batch: int = BATCH) -> int:
        """Move layout 4's tasks, ``batch`` per call, for up to ``budget`` seconds (at least one call)
        while any are left: how many moved."""
        if not self.present():
            return 0
        if not self._calls.joins_slots:
            if not self._warned:
                log.warning("layout 4's data is served in place on this cluster: its move is not built")
                self._warned = True
            return 0
        moved, deadline = 0, time.monotonic() + budget
        while True:
            reply = self._calls._call("upgrade", self.prefix, now, self._cursor, batch, self.old.namespace)
            cursor, count, left = str(reply).split(" ")
            self._cursor, moved = cursor, moved + int(count)
            if left == "0":
                self._present, self._read_at = False, time.monotonic()
                log.info("layout 4's data moved to layout 5's keys")
                return moved
            if time.monotonic() >= deadline:
                return moved


def merged_stats(rows: Sequence[Any]) -> list[Any]:
    """``stats.lua``'s rows with a queue's rows of both layouts made one: settings of the first (layout
    5's), counts summed, the oldest pending's ``ready_at`` the earlier."""
    merged: dict[str, list[Any]] = {}
    for row in rows:
        name = row[0]
        if name not in merged:
            merged[name] = list(row)
            continue
        into = merged[name]
        for place in range(5, 11):
            into[place] = int(into[place]) + int(row[place])
        oldest = [float(value) for value in (into[11], row[11]) if value]
        into[11] = repr(min(oldest)) if oldest else ""
    return list(merged.values())
