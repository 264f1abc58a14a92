"""The overview's charts: executions and failures per minute over the last hour.

They come from the broker's per-minute counters (``Inspector.history``, ``conveyor.history``), so they
show the recent past as soon as the page opens, whichever process settled the tasks, and survive a
restart of the dashboard. The page polls them with the rest of the overview.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conveyor.brokers.base import KeepsHistory
from conveyor.history import MINUTE

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["CHART_MINUTES", "chart_series"]

#: Minutes the overview's charts span.
CHART_MINUTES = 60


def chart_series(conveyor: Conveyor, minutes: int = CHART_MINUTES) -> dict[str, Any] | None:
    """``{"bucket": 60, "t": [minute starts], "processed": [...], "failed": [...]}``, oldest first and
    ending with the current (partial) minute; None when the broker keeps no history."""
    if not isinstance(conveyor.broker, KeepsHistory):
        return None
    series = conveyor.inspect.history(minutes=minutes)
    return {
        "bucket": MINUTE,
        "t": [m.at for m in series],
        "processed": [m.processed for m in series],
        "failed": [m.failed for m in series],
    }
