"""How many tasks a worker claims beyond its free slots (``WorkerConfig.prefetch``).

A fixed number (``prefetch=N``), or by default as many as its slots finish in :data:`HORIZON`
seconds at the duration its tasks took lately (the slots' speed: ``concurrency`` divided by the
mean time a finished task held its slot), at most :data:`MOST`. Short tasks then come in large
batches (one claim, one round trip, for hundreds: the claim's fixed cost is most of a no-op task's
cost in batches of ten), while slow ones are not prefetched at all: a worker never holds more
than ``HORIZON`` of its slots' work it has not started, so a task arriving in a queue served first, or a
worker with free slots, waits at most that long behind tasks this worker holds and has not started.
The exception is a queue whose short tasks are followed by slow ones: the claim made at the short
tasks' speed may take up to :data:`MOST` slow ones, as a fixed prefetch of that size would (the
allowance falls to none within :data:`WINDOW` of the tasks slowing down, for the claims after it).
A worker that finished nothing within the window (idle) prefetches nothing.

Why the slots' speed and not the rate the worker finished tasks at: that rate is bounded by the
claims themselves. Several workers sharing one SQLite file each finished tasks at a fraction of
the file's rate, so each claimed small batches and paid more commits per task, and a worker that
got a larger batch by chance finished faster and so claimed larger ones still (docs/architecture.md,
"Several processes on one file").

Where every commit is a disk sync (a broker that ``SettlesWithClaim``: SQLite) the cap is
:data:`MOST_SYNCED`: the work a worker holds must cover a commit's wait (milliseconds on a busy disk)
while the pool runs, and the fewer commits per task, the fewer syncs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HORIZON", "MOST", "MOST_SYNCED", "WINDOW", "Prefetch"]

#: Seconds of the slots' work (at the tasks' recent duration) held beyond the busy slots.
HORIZON = 0.01
#: The most tasks prefetched when the rate is high.
MOST = 100
#: The most tasks prefetched where each commit is a disk sync (``SettlesWithClaim``).
MOST_SYNCED = 300
#: The speed is measured over at least this many seconds (shorter calls reuse the last allowance).
WINDOW = 0.05
_SHORTEST = 1e-6  # seconds: a task's slot time is read as at least this (a clock's step may be coarse)


class Prefetch:
    """``capacity()``: the most tasks to keep claimed and not finished (slots + prefetch allowance)."""

    def __init__(
        self,
        concurrency: int,
        prefetch: int | None,
        finished: Callable[[], int],
        busy: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
        most: int = MOST,
    ) -> None:
        self.concurrency = concurrency
        self.most = most
        self.fixed = prefetch
        self.finished = finished  # tasks finished since the start: a count that only grows
        self.busy = busy  # seconds those tasks held their slots, summed: only grows
        self.clock = clock
        self.allowance = prefetch if prefetch is not None else 0
        self._since = clock()
        self._done = finished()
        self._busy = busy()

    def capacity(self) -> int:
        if self.fixed is None:
            now = self.clock()
            if now - self._since >= WINDOW:  # several claimers may get here at once: each writes a fair reading
                done, busy = self.finished(), self.busy()
                finished, held = done - self._done, busy - self._busy
                if finished <= 0:
                    self.allowance = 0
                else:  # tasks per second the slots finish, at the mean time a task held one
                    speed = self.concurrency * finished / max(held, finished * _SHORTEST)
                    self.allowance = min(self.most, int(speed * HORIZON))
                self._since, self._done, self._busy = now, done, busy
        return self.concurrency + self.allowance
