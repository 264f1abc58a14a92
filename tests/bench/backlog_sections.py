"""Checks of the backlog section run by ``test_bench_backlog.py`` as a script (``bench`` importable)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.backlog_report import HEADING, Level, Run, markdown_section, merge, quantile, section_of, splice_section
from bench.report import write_report

REPORT = "# Benchmarks\n\nintro\n\n## Results\n\nrows\n\n## Notes\n\n1. a note\n\n## Settings\n\n- s\n"


def _run() -> Run:
    level = Level(queued=10_000, grown=[4_000_000, 0, 0], enqueue_rate=1e5, single_ms=[0.1] * 100,
                  batch_ms=[1.0] * 10, batch_size=100, cpu_us=5.0)  # fmt: skip
    return Run(backend="cluster", detail="3 masters", parts=["master 1", "master 2", "master 3"], levels=[level])


def check_the_section_names_a_namespace_held_by_one_master_and_replaces_itself() -> None:
    meta = {"date": "today", "duration_s": 1, "command": "python -m bench.backlog", "machine": "here"}
    section = markdown_section([_run()], meta)
    assert section.startswith(HEADING + "\n") and section.endswith("\n")
    assert (
        "| Redis Cluster, 3 masters | 10,000 | 400 | 100,000 | 5.0 | 0.10 | 0.10 | 1.00 | 1.00 | master 1 100%"
        in section
    )
    assert "whole queue on one master" in section
    once = splice_section(REPORT, section)
    assert once.index("rows") < once.index(HEADING) < once.index("## Notes")
    twice = splice_section(once, section.replace("today", "tomorrow"))
    assert twice == once.replace("today", "tomorrow")
    assert splice_section("", section) == section
    assert splice_section(REPORT.split("## Notes")[0], section).endswith(section)  # no later heading: at the end


def check_the_main_report_keeps_the_backlog_section(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    meta = {"date": "d", "n": 1, "reps": 1, "nproc": 2, "cpu": "c", "python": "3", "placement": "p"}
    write_report({"meta": meta, "figures": []}, path)
    assert section_of(path.read_text()) is None
    section = markdown_section([_run()], {"date": "d", "duration_s": 1, "command": "c", "machine": "m"})
    path.write_text(splice_section(path.read_text(), section))
    write_report({"meta": meta, "figures": []}, path)
    text = path.read_text()
    assert section_of(text) == section + "\n" and text.index(HEADING) < text.index("## Settings")


def check_passes_merge_into_medians_and_pooled_samples() -> None:
    passes = [_run(), _run(), _run()]
    for number, run in enumerate(passes):
        run.levels[0].enqueue_rate, run.levels[0].cpu_us = 1e5 * (number + 1), 5.0 * (3 - number)
        run.levels[0].single_ms = [float(number)] * 100
    merged = merge(passes).levels[0]
    assert (merged.enqueue_rate, merged.rates, merged.cpu_us) == (2e5, [1e5, 2e5, 3e5], 10.0)
    assert len(merged.single_ms) == 300 and quantile(merged.single_ms, 0.5) == 1.0
    assert merged.grown == [4_000_000, 0, 0]


def check_a_namespace_on_another_master_each_pass_stays_on_one_master_merged() -> None:
    passes = [_run(), _run()]
    passes[1].levels[0].grown = [0, 0, 4_100_000]
    merged = merge(passes)
    assert merged.levels[0].grown == [4_000_000, 0, 0]  # one pass's bytes, not 50% on two masters
    meta = {"date": "today", "duration_s": 1, "command": "python -m bench.backlog", "machine": "here"}
    assert "whole queue on one master" in markdown_section([merged], meta)


def check_a_partitioned_queue_is_named_with_its_partitions_and_its_spread_told() -> None:
    run = _run()
    run.backend, run.partitions = "partitioned", 6
    run.levels[0].grown = [1_300_000, 1_400_000, 1_300_000]
    section = markdown_section([merge([run])], {"date": "d", "duration_s": 1, "command": "c", "machine": "m"})
    assert "| Redis Cluster, 3 masters, 6 partitions | 10,000 | 400 |" in section
    assert "master 1 32%, master 2 35%, master 3 32%" in section
    told = "- Redis Cluster, 3 masters, 6 partitions: the bytes by master (10,000: 32%, 35%, 32%) are within 2% of"
    assert told in section and "whole queue on one master" not in section


def check_quantiles_are_nearest_rank() -> None:
    samples = [float(i) for i in range(100, 0, -1)]
    assert (quantile(samples, 0.5), quantile(samples, 0.99), quantile([3.0], 0.99)) == (50.0, 99.0, 3.0)


if __name__ == "__main__":
    check_the_section_names_a_namespace_held_by_one_master_and_replaces_itself()
    with tempfile.TemporaryDirectory() as directory:
        check_the_main_report_keeps_the_backlog_section(Path(directory))
    check_passes_merge_into_medians_and_pooled_samples()
    check_a_namespace_on_another_master_each_pass_stays_on_one_master_merged()
    check_a_partitioned_queue_is_named_with_its_partitions_and_its_spread_told()
    check_quantiles_are_nearest_rank()
