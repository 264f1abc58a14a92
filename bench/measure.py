"""Figures and how they are summarized: every figure is the median of its repetitions."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Figure", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class Figure:
    """One measured quantity of one library/variant on one workload.

    ``runs`` holds every repetition; ``value`` is their median (None: not measured, ``note`` says why).
    """

    library: str
    variant: str
    workload: str
    metric: str
    unit: str
    runs: list[float] = field(default_factory=list)
    note: str = ""
    higher_is_better: bool = True

    @property
    def value(self) -> float | None:
        return statistics.median(self.runs) if self.runs else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["value"] = self.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        data = {k: v for k, v in data.items() if k != "value"}
        return cls(**data)
