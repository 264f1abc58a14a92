"""What every section of ``docs/benchmarks.md`` shares: number format, the best figure, ratios by pass."""

from __future__ import annotations

import statistics

from bench.measure import Figure
from bench.peer_runs import SQLITE_PEER
from bench.sqlite_runs import CURVE, FLOOR

__all__ = ["APART", "best", "cell", "fmt", "per_pass", "ratio_text"]

#: Libraries reported in their own sections, never as rows of the results table or as peers.
APART = frozenset({"server floor", FLOOR, CURVE})


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def best(figures: list[Figure], workload: str, prefix: str | None) -> Figure | None:
    """The best measured figure of libraries starting with ``prefix`` (None: the peers on the server)."""
    candidates = [
        f
        for f in figures
        if f.workload == workload
        and f.value is not None
        and f.library not in APART
        and (f.library.startswith(prefix) if prefix else not f.library.startswith(("Conveyor", SQLITE_PEER)))
    ]
    if not candidates:
        return None
    pick = max if candidates[0].higher_is_better else min
    return pick(candidates, key=lambda f: f.value or 0.0)


def cell(figure: Figure | None, missing: str) -> str:
    return f"{fmt(figure.value)} ({figure.library}, {figure.variant})" if figure else missing


def per_pass(mine: Figure, theirs: list[Figure]) -> list[float]:
    """``mine`` over the best of ``theirs``, pass by pass (by rate; for latency the lowest of theirs):
    empty unless every figure has a run in every pass (a failed run would shift the passes)."""
    counts = {len(f.runs) for f in [mine, *theirs]}
    if len(counts) != 1 or 0 in counts:
        return []
    pick = max if mine.higher_is_better else min
    return [mine.runs[i] / pick(f.runs[i] for f in theirs) for i in range(len(mine.runs))]


def ratio_text(ratios: list[float]) -> str:
    """``4.92x (4.90-5.22)``: the median of the per-pass ratios and their range."""
    if not ratios:
        return "—"
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}x"
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
