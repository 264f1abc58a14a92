"""Per-minute counts of settled executions, kept by the broker for the dashboard's charts.

The rule every broker follows (the conformance suite checks it): a ``settle`` that applies an outcome
adds one, in the same atomic step, to the counter of the task's queue for the minute of ``now``:
``complete`` to *completed*, ``retry`` to *retried*, ``archive`` to *archived*; ``release`` gives the
attempt back and counts nothing, and neither does a lease the reaper reclaims (no execution reported
an end) or a task that expires before it starts. A minute is ``floor(now / 60)``. Brokers keep at least the last
:data:`KEEP_MINUTES` minutes and may forget older ones (``clean``, or an expiry); reads never reach
further back, so what a read returns does not depend on when a broker forgets.

Brokers keep the storage only (``KeepsHistory`` in ``conveyor.brokers.base``); this module holds the
bucketing, the window and the folding of stored rows into a series.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "KEEP_MINUTES",
    "KINDS",
    "MINUTE",
    "MinuteCounts",
    "QueueMinute",
    "Tally",
    "fold",
    "minute_of",
    "window",
]

#: Seconds per bucket.
MINUTE = 60
#: How far back a read may reach: 24 hours of minutes.
KEEP_MINUTES = 24 * 60
#: Outcome kind -> index of its counter in ``(completed, retried, archived)``.
KINDS = {"complete": 0, "retry": 1, "archive": 2}


def minute_of(now: float) -> int:
    """The bucket of epoch second ``now``: ``floor(now / 60)``."""
    return int(now // MINUTE)


def window(now: float, minutes: int) -> tuple[int, int]:
    """The first and last bucket of the ``minutes`` minutes ending with the current one (clamped to
    :data:`KEEP_MINUTES`)."""
    last = minute_of(now)
    return last - min(minutes, KEEP_MINUTES) + 1, last


@dataclass(frozen=True, slots=True)
class QueueMinute:
    """What a broker stores: one queue's counters for one minute (``minute`` as ``floor(now / 60)``)."""

    queue: str
    minute: int
    completed: int = 0
    retried: int = 0
    archived: int = 0


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Executions settled in one minute starting at ``at`` (epoch seconds), of one queue or all.

    ``failed`` = ``retried`` + ``archived``; ``processed`` = ``completed`` + ``failed``.
    """

    at: float
    completed: int = 0
    retried: int = 0
    archived: int = 0

    @property
    def failed(self) -> int:
        return self.retried + self.archived

    @property
    def processed(self) -> int:
        return self.completed + self.retried + self.archived


class Tally:
    """Counters gathered while one settle call applies its outcomes, written by the broker at its end."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], list[int]] = {}

    def add(self, queue: str, kind: str, now: float, count: int = 1) -> None:
        """Count ``count`` applied outcomes of ``kind`` (``release`` counts nothing)."""
        index = KINDS.get(kind)
        if index is None:
            return
        key = (queue, minute_of(now))
        row = self.counts.get(key)
        if row is None:
            row = self.counts[key] = [0, 0, 0]
        row[index] += count

    def rows(self) -> list[QueueMinute]:
        return [QueueMinute(queue, minute, *row) for (queue, minute), row in self.counts.items()]


def fold(rows: Iterable[QueueMinute], first: int, last: int, queue: str | None = None) -> list[MinuteCounts]:
    """One :class:`MinuteCounts` per minute ``first..last``, oldest first, zeros where nothing was
    stored; the counters of ``queue`` only, or summed over every queue."""
    sums = {minute: [0, 0, 0] for minute in range(first, last + 1)}
    for row in rows:
        counts = sums.get(row.minute)
        if counts is None or (queue is not None and row.queue != queue):
            continue
        counts[0] += row.completed
        counts[1] += row.retried
        counts[2] += row.archived
    return [MinuteCounts(float(minute * MINUTE), *counts) for minute, counts in sums.items()]
