"""When an idle waiter's wait ends at the latest: the first due time the broker's last claim read.

A delayed task or a retry falls due with no call at all, so no call pushes a ``wake`` token for it. A
claim that took fewer tasks than it asked for also reads the first due time of its slots' scheduled
and retry tasks (``claim.lua``); the broker's next blocking pop is cut short there, and the claim
queued behind it promotes and takes the task (docs/architecture.md, "How an idle worker wakes, per
broker"). The due time is kept for the broker, not per thread: a worker's claimers take turns at
waiting, so the waiter's own last claim has often not read it. It is counted from the ``now`` its claim ran at
(the server's TIME, or the caller's), turned into a monotonic deadline when the reply arrives, so
the clocks of the host and the server never meet. A claim at a ``now`` that is not the present (a
FakeClock's, in tests) notes nothing: its time does not pass with real time.

The server ends a blocking pop only at its next tick (``1/hz``: up to 100 ms late at the default
``hz 10``), so a pop cut by a due time ends :data:`TICK` early
(its claim finds nothing and reads the due time again) and the last stretch is slept here.

A due time ends one wait, not every wait until the next claim: a caller that waits again first sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from conveyor.clock import is_present

__all__ = ["TICK", "DueTimes"]

#: The server's tick at the default ``hz 10``: how late it may end a blocking pop.
TICK = 0.1


class DueTimes:
    """The monotonic deadline of the first due time the broker's last claim short of its limit read."""

    def __init__(self) -> None:
        self._deadline: float | None = None

    def claimed(self, due: float | None, ran_at: float, present: Callable[[], float] | None) -> None:
        """A claim short of its limit ran at ``ran_at`` and read ``due`` (None: nothing due).
        ``present``: a clock to compare ``ran_at`` with (None: it is the server's TIME, the present)."""
        if due is None or (present is not None and not is_present(ran_at, present)):
            self._deadline = None
        else:
            self._deadline = time.monotonic() + (due - ran_at)

    def cap(self, timeout: float) -> tuple[float, bool]:
        """A blocking pop of up to ``timeout`` s, cut by the noted due time: its timeout (0: pop
        nothing, the due time has come, slept to here if it was within a :data:`TICK`) and whether
        the due time cut it. Uses the due time up."""
        deadline, self._deadline = self._deadline, None
        if deadline is None:
            return timeout, False
        left = deadline - time.monotonic()
        if left >= timeout + TICK:
            return timeout, False
        if left > TICK:
            return left - TICK, True
        if left > 0:
            time.sleep(left)  # shorter than the server's tick: a pop would end later
        return 0.0, True
