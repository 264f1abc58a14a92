"""Command-line options of a worker, shared by ``python -m conveyor.worker``, the supervisor (which
passes a config on to its children) and the ``conveyor worker`` CLI."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.worker.config import WorkerConfig, parse_queues

__all__ = ["add_worker_options", "config_from_args", "config_to_args"]

#: option → (WorkerConfig field, type)
_OPTIONS: dict[str, tuple[str, type]] = {
    "--concurrency": ("concurrency", int),
    "--processes": ("processes", int),
    "--prefetch": ("prefetch", int),
    "--claimers": ("claimers", int),
    "--lease": ("lease_for", float),
    "--heartbeat": ("heartbeat_interval", float),
    "--reaper-interval": ("reaper_interval", float),
    "--promoter-interval": ("promoter_interval", float),
    "--janitor-interval": ("janitor_interval", float),
    "--poll-interval": ("poll_interval", float),
    "--grace": ("shutdown_grace", float),
    "--registry-interval": ("registry_interval", float),
    "--summary-interval": ("summary_interval", float),
}


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--concurrency``, ``--processes``, ``--queues``, ``--strict``, ``--lease``, ... to ``parser``."""
    parser.add_argument("--queues", help="queues to serve, optionally weighted: emails=3,default=1")
    parser.add_argument("--strict", action="store_true", default=None, help="visit queues strictly in order")
    parser.add_argument(
        "--no-freeze-heap",
        dest="freeze_heap",
        action="store_false",
        default=None,
        help="leave the heap to the garbage collector as it is (WorkerConfig.freeze_heap)",
    )
    parser.add_argument(
        "--middleware", action="append", default=[], metavar="REF", help="a Middleware to use, as pkg.module:obj"
    )
    for option, (field, kind) in _OPTIONS.items():
        parser.add_argument(option, dest=field, type=kind, default=None, help=f"WorkerConfig.{field}")


def config_from_args(ns: argparse.Namespace, base: WorkerConfig | None = None) -> WorkerConfig:
    """``base`` (default: ``WorkerConfig.from_env()``) with the options given on the command line."""
    config = base if base is not None else WorkerConfig.from_env()
    changes: dict[str, Any] = {}
    if ns.queues:
        changes["queues"], changes["weights"] = parse_queues(ns.queues)
    if ns.strict:
        changes["strict"] = True
    if getattr(ns, "freeze_heap", None) is False:
        changes["freeze_heap"] = False
    if getattr(ns, "middleware", None):
        from conveyor.worker.loader import load_object

        changes["middleware"] = (*config.middleware, *(load_object(ref) for ref in ns.middleware))
        changes["middleware_refs"] = (*config.middleware_refs, *ns.middleware)
    for field, _ in _OPTIONS.values():
        value = getattr(ns, field, None)
        if value is not None:
            changes[field] = value
    return replace(config, **changes)


def config_to_args(config: WorkerConfig) -> list[str]:
    """The options that make ``config_from_args`` rebuild ``config`` (middleware: by its references)."""
    weights = config.weights or (1,) * len(config.queues)
    spec = ",".join(f"{q}={w}" if config.weights else q for q, w in zip(config.queues, weights, strict=True))
    out = ["--queues", spec]
    if config.strict:
        out.append("--strict")
    if not config.freeze_heap:
        out.append("--no-freeze-heap")
    for ref in config.middleware_refs:
        out += ["--middleware", ref]
    for option, (field, _) in _OPTIONS.items():
        value = getattr(config, field)
        if field == "summary_interval" and value is None:
            value = 0.0  # None means "off" here, not "the default"
        if value is not None:
            out += [option, repr(value)]
    return out


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conveyor.worker", description="Run a Conveyor worker.")
    parser.add_argument("app", help="the app to serve, as pkg.module:app")
    add_worker_options(parser)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--report-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)
