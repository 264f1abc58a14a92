"""The ``/metrics`` exposition as tables a person can read (the "Metrics" page; ``/metrics`` stays raw).

Each family becomes one table: a row per label set with its value; a histogram's row shows its count,
sum and mean instead of its buckets. ``*_created`` timestamps are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Family", "Row", "families"]


@dataclass
class Row:
    """One label set: ``labels`` as ``k="v"`` text, and its figures (``value``, or ``count``/``sum``)."""

    labels: str
    value: float | None = None
    count: float | None = None
    sum: float | None = None

    @property
    def mean(self) -> float | None:
        return None if not self.count or self.sum is None else self.sum / self.count


@dataclass
class Family:
    name: str
    kind: str
    help: str
    rows: list[Row] = field(default_factory=list)


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "le")


def families(exposition: str) -> list[Family]:
    """The families of ``exposition`` (Prometheus text format), in its order."""
    out: list[Family] = []
    for metric in text_string_to_metric_families(exposition):
        if metric.name.endswith("_created"):
            continue
        family = Family(metric.name, metric.type, metric.documentation)
        rows: dict[str, Row] = {}
        for sample in metric.samples:
            if sample.name.endswith("_created") or sample.name.endswith("_bucket"):
                continue
            row = rows.setdefault(_labels(sample.labels), Row(_labels(sample.labels)))
            if metric.type == "histogram" and sample.name.endswith("_count"):
                row.count = sample.value
            elif metric.type == "histogram" and sample.name.endswith("_sum"):
                row.sum = sample.value
            else:
                row.value = sample.value
        family.rows = list(rows.values())
        out.append(family)
    return out
