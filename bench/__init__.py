"""Conveyor's benchmark harness: the same workloads on Conveyor and its peers, one server, one run.

Run ``python -m bench`` (full) or ``python -m bench --smoke`` (CI). See ``docs/benchmarks.md``.
This package imports nothing heavy at import time: peer scripts (run in their own virtualenv)
import :mod:`bench.recorder` from it.
"""
