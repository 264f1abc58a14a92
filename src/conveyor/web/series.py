"""The overview's charts: executions and failures over the last hour or day, on a time axis.

They come from the broker's per-minute counters (``Inspector.history``, ``conveyor.history``), so they
show the recent past as soon as the page opens, whichever process settled the tasks, and survive a
restart of the dashboard. The page polls them with the rest of the overview.

A chart holds finished buckets only: the bucket still under way would show a dip that is only its
missing seconds. What is under way feeds the headline figures instead (``current``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conveyor.brokers.base import KeepsHistory
from conveyor.history import MINUTE, MinuteCounts

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["CHART_MINUTES", "RANGES", "chart_series"]

#: Minutes the overview's charts span by default.
CHART_MINUTES = 60
#: Range name -> (minutes spanned, minutes per bucket): a day in 10-minute buckets keeps 144 points.
RANGES = {"1h": (60, 1), "24h": (24 * 60, 10)}


def _buckets(series: list[MinuteCounts], per: int) -> list[tuple[float, int, int]]:
    """``(start, processed, failed)`` per ``per``-minute bucket aligned on multiples of ``per``."""
    out: dict[float, list[int]] = {}
    for m in series:
        start = (m.at // (per * MINUTE)) * per * MINUTE
        row = out.setdefault(start, [0, 0])
        row[0] += m.processed
        row[1] += m.failed
    return [(start, row[0], row[1]) for start, row in out.items()]


def chart_series(conveyor: Conveyor, range_name: str = "1h") -> dict[str, Any] | None:
    """``{"range", "bucket" (seconds), "t" (bucket starts), "processed", "failed", "current"}``: the
    finished buckets of ``range_name`` (a key of :data:`RANGES`), oldest first; ``current`` counts the
    last finished minute and the one under way (``processed``, ``failed``, ``seconds`` they span).
    None when the broker keeps no history. Raises ValueError for an unknown range."""
    if range_name not in RANGES:
        raise ValueError(f"unknown range {range_name!r}; one of: {', '.join(RANGES)}")
    if not isinstance(conveyor.broker, KeepsHistory):
        return None
    minutes, per = RANGES[range_name]
    now = conveyor.now()
    series = conveyor.inspect.history(minutes=minutes)
    recent = series[-2:]
    # A bucket that began before the window or has not ended yet would dip: only whole ones are drawn.
    buckets = [b for b in _buckets(series, per) if b[0] >= series[0].at and b[0] + per * MINUTE <= now]
    return {
        "range": range_name,
        "bucket": per * MINUTE,
        "t": [b[0] for b in buckets],
        "processed": [b[1] for b in buckets],
        "failed": [b[2] for b in buckets],
        "current": {
            "processed": sum(m.processed for m in recent),
            "failed": sum(m.failed for m in recent),
            "seconds": max(1.0, now - recent[0].at),
        },
    }
