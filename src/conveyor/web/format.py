"""Small display helpers for templates (times, durations, JSON)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

__all__ = ["age", "iso", "pretty_json", "relative"]


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
