"""The report of ``bench.bench_redis``: its figures against issue 4's aims, as text and as Markdown.

Each figure was measured once per run; over several runs a figure is reported as its median, its range
and in how many runs it met its aim (this shared machine's speed moves by up to 2x between runs).
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AIMED", "BESIDE", "Aim", "Report", "Shown", "git_revision"]


@dataclass(frozen=True)
class Aim:
    """At least ``bound`` (``at_least``), or below it."""

    bound: float
    at_least: bool
    text: str

    def met(self, value: float) -> bool:
        return value >= self.bound if self.at_least else value < self.bound


@dataclass(frozen=True)
class Shown:
    """How one figure of a run (``key``) is shown: its label (``{batch}`` and ``{concurrency}`` stand for
    the run's settings), format and unit, and its aim if any."""

    key: str
    label: str
    fmt: str
    unit: str
    aim: Aim | None = None


#: The figures issue 4 sets an aim for.
AIMED = (
    Shown("single_ratio", "single enqueue, as a share of PING round trips/s (alternating rounds)", ".2f", "x",
          Aim(0.8, True, ">= 0.8x")),
    Shown("batch", "batch enqueue (10,000 tasks per call)", ",.0f", "/s", Aim(150_000, True, "> 150,000/s")),
    Shown("drain", "drain, one process: claim {batch}, one settle per batch, no handler run", ",.0f", "/s",
          Aim(30_000, True, ">= 30,000/s")),
    Shown("runtime_drain", "drain, `Worker.run()`: no-op tasks, concurrency {concurrency}, one process", ",.0f", "/s",
          Aim(30_000, True, ">= 30,000/s")),
    Shown("p50", "idle-to-running p50 at 200 tasks/s", ".3f", " ms", Aim(0.5, False, "< 0.5 ms")),
    Shown("p99", "idle-to-running p99 at 200 tasks/s", ".3f", " ms", Aim(2.0, False, "< 2 ms")),
)  # fmt: skip

#: Reported beside them, without an aim.
BESIDE = (
    Shown("ping", "raw PING round trips", ",.0f", "/s"),
    Shown("single", "single enqueue (`broker.enqueue` of one task)", ",.0f", "/s"),
    Shown("app_ratio", "`Conveyor.enqueue` by name, as a share of PING round trips/s", ".2f", "x"),
    Shown("runtime_share", "drain, `Worker.run()`, as a share of the one-process drain of the same run", ".2f", "x"),
    Shown("idle50", "PING round trip p50 at 200/s between idle processes (the latency's floor)", ".3f", " ms"),
    Shown("memory", "server memory per queued task (9-byte payload)", ",.0f", " B"),
)


class Report:
    """The figures of ``runs`` (one dict per run): each figure's median (its value, after one run),
    then, after several, their range and in how many runs it met its aim."""

    def __init__(self, runs: list[dict[str, float]]) -> None:
        self.runs = runs

    def value(self, key: str) -> float:
        return statistics.median(run[key] for run in self.runs)

    def values(self, key: str) -> list[float]:
        return [run[key] for run in self.runs]

    def server_times(self) -> list[str]:
        """The keys of the server's time per task, one per kind of call (``"server: <what>"``)."""
        return [key for key in self.runs[0] if key.startswith("server: ")]

    def met(self, key: str, aim: Aim) -> int:
        """In how many runs figure ``key`` met ``aim``."""
        return sum(1 for value in self.values(key) if aim.met(value))

    def spread(self, key: str, fmt: str, aim: Aim | None = None, label: str = "") -> str:
        """Nothing for one run; else ``"; <label> over N runs <min>-<max>[, aim met in k]"``."""
        if len(self.runs) < 2:
            return ""
        values = self.values(key)
        text = f"; {label}{' ' if label else ''}over {len(values)} runs {min(values):{fmt}}-{max(values):{fmt}}"
        if aim is not None:
            text += f", aim met in {self.met(key, aim)}"
        return text

    def aim(self, key: str) -> Aim:
        """The aim of figure ``key`` (one of :data:`AIMED`)."""
        aim = next(shown.aim for shown in AIMED if shown.key == key)
        assert aim is not None
        return aim

    def markdown(self, header: Sequence[str], settings: dict[str, int]) -> str:
        """The report as Markdown: ``header`` lines, the aims' table, the figures beside them and the
        server's own time per task; ``settings`` fill in the labels (claim batch, concurrency)."""
        runs = len(self.runs)

        def cell(shown: Shown, value: float) -> str:
            return f"{value:{shown.fmt}}{shown.unit}"

        def span(shown: Shown) -> str:
            values = self.values(shown.key)
            return f"{cell(shown, min(values))} to {cell(shown, max(values))}"

        lines = [*header, "", "| figure | median | range | aim | met in |", "|---|---:|---|---|---:|"]
        for shown in AIMED:
            assert shown.aim is not None
            lines.append(
                f"| {shown.label.format(**settings)} | {cell(shown, self.value(shown.key))} | {span(shown)} "
                f"| {shown.aim.text} "
                f"| {self.met(shown.key, shown.aim)} of {runs} |"
            )
        lines += ["", "Beside them:", "", "| figure | median | range |", "|---|---:|---|"]
        for shown in BESIDE:
            lines.append(f"| {shown.label} | {cell(shown, self.value(shown.key))} | {span(shown)} |")
        for key in self.server_times():
            shown = Shown(key, f"server time per task: {key[8:]} (`FCALL` µs, `INFO commandstats`)", ".1f", " µs")
            lines.append(f"| {shown.label} | {cell(shown, self.value(key))} | {span(shown)} |")
        return "\n".join(lines) + "\n"

    def write_markdown(self, path: Path, header: Sequence[str], settings: dict[str, int]) -> None:
        path.write_text(self.markdown(header, settings), encoding="utf-8")


def git_revision(root: Path) -> str:
    """The checked-out commit (short), "+ changes" if the tree differs from it; "?" outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" + changes" if dirty else "")
