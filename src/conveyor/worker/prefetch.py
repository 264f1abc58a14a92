"""How many tasks a worker claims beyond its free slots (``WorkerConfig.prefetch``).

A fixed number (``prefetch=N``), or by default as many as the pool starts in :data:`HORIZON`
seconds at the rate it finished tasks lately, at most :data:`MOST`. Short tasks then come in large
batches (one claim, one round trip, for hundreds: the claim's fixed cost is most of a no-op task's
cost in batches of ten), while slow ones are not prefetched at all: a worker never holds more
than ``HORIZON`` of work it has not started, so a task arriving in a queue served first, or a
worker with free slots, waits at most that long behind tasks this worker holds and has not started.
The exception is a queue whose short tasks are followed by slow ones: the claim made at the short
tasks' rate may take up to :data:`MOST` slow ones, as a fixed prefetch of that size would (the
allowance falls to none within :data:`WINDOW` of the rate falling, for the claims after it).

Where every commit is a disk sync (a broker that ``SettlesWithClaim``: SQLite) the cap is
:data:`MOST_SYNCED`: the work a worker holds must cover a commit's wait (0.5-5 ms on a busy disk)
while the pool runs, and the fewer commits per task, the fewer syncs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HORIZON", "MOST", "MOST_SYNCED", "WINDOW", "Prefetch"]

#: Seconds of work (at the recent finishing rate) held beyond the busy slots.
HORIZON = 0.01
#: The most tasks prefetched when the rate is high.
MOST = 100
#: The most tasks prefetched where each commit is a disk sync (``SettlesWithClaim``).
MOST_SYNCED = 300
#: The rate is measured over at least this many seconds (shorter calls reuse the last allowance).
WINDOW = 0.05


class Prefetch:
    """``capacity()``: the most tasks to keep claimed and not finished (slots + prefetch allowance)."""

    def __init__(
        self,
        concurrency: int,
        prefetch: int | None,
        finished: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        most: int = MOST,
    ) -> None:
        self.concurrency = concurrency
        self.most = most
        self.fixed = prefetch
        self.finished = finished  # tasks finished since the start: a count that only grows
        self.clock = clock
        self.allowance = prefetch if prefetch is not None else 0
        self._since = clock()
        self._done = finished()

    def capacity(self) -> int:
        if self.fixed is None:
            now = self.clock()
            elapsed = now - self._since
            if elapsed >= WINDOW:  # several claimers may get here at once: each writes a fair reading
                done = self.finished()
                self.allowance = min(self.most, int((done - self._done) / elapsed * HORIZON))
                self._since, self._done = now, done
        return self.concurrency + self.allowance
