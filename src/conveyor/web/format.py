"""Small display helpers for templates (times, durations, JSON)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from conveyor.selection import call_text

if TYPE_CHECKING:
    from conveyor.model import TaskInfo

__all__ = ["age", "call_args", "duration", "iso", "pretty_json", "relative"]


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def age(seconds: float) -> str:
    """``45s``, ``3m12s``, ``2h05m``, ``4d03h``."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def relative(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    return f"in {age(delta)}" if delta > 0.5 else f"{age(-delta)} ago"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def call_args(info: TaskInfo, width: int = 80) -> str:
    """The call's arguments in one line (``1, "x", width=640``), cut to ``width`` characters."""
    text = call_text(info.args, info.kwargs)
    return text if len(text) <= width else text[: width - 1] + "…"


def duration(info: TaskInfo) -> str:
    """How long the latest execution ran (start to finish, or to its failure); ``-`` if unknown."""
    end = info.finished_at if info.finished_at is not None else (info.errors[-1].at if info.errors else None)
    if info.started_at is None or end is None or end < info.started_at:
        return "-"
    seconds = end - info.started_at
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else age(seconds) if seconds >= 60 else f"{seconds:.1f}s"
