"""When an idle waiter's wait ends at the latest: the first due time its thread's last claim read.

A delayed task or a retry falls due with no call at all, so no call pushes a ``wake`` token for it. A
claim that took fewer tasks than it asked for also reads the first due time of its slots' scheduled
and retry tasks (``claim.lua``); this thread's next blocking pop is cut short there, and the claim
queued behind it promotes and takes the task (docs/architecture.md, "How an idle worker wakes, per
broker"). The due time is counted from the ``now`` its claim ran at (the server's TIME, or the
caller's), turned into a monotonic deadline when the reply arrives, so the clocks of the host and the
server never meet. A claim at a ``now`` that is not the present (a FakeClock's, in tests) notes
nothing: its time does not pass with real time, and a real wait for it would end for nothing.

A due time ends one wait, not every wait until the next claim: a caller that waits again first sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["WALL_SLACK", "DueTimes"]

#: A claim's ``now`` within this many seconds of the present (the server's clock, else the host's)
#: is the present: its due time becomes a deadline in real time.
WALL_SLACK = 1.0


class DueTimes:
    """Per thread: the monotonic deadline of the first due time its last claim read, if any."""

    def __init__(self) -> None:
        self._mine = threading.local()

    def claimed(self, due: float | None, ran_at: float, present: Callable[[], float] | None) -> None:
        """This thread's claim ran at ``ran_at`` and read ``due`` (None: nothing due, or the claim
        filled its limit). ``present``: a clock to compare ``ran_at`` with (None: it is the server's
        TIME, the present by definition)."""
        if due is None or (present is not None and abs(ran_at - present()) > WALL_SLACK):
            self._mine.deadline = None
        else:
            self._mine.deadline = time.monotonic() + (due - ran_at)

    def cap(self, timeout: float) -> tuple[float, bool]:
        """A wait of up to ``timeout`` s, shortened to the noted due time: the seconds to wait (0 or
        less: the due time has passed) and whether the due time ends it. Uses the due time up."""
        deadline: float | None = getattr(self._mine, "deadline", None)
        if deadline is None:
            return timeout, False
        self._mine.deadline = None
        left = deadline - time.monotonic()
        return (left, True) if left < timeout else (timeout, False)
