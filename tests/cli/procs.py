"""Helpers for CLI tests that run ``python -m conveyor`` as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

__all__ = ["Spawn", "clean_env", "conveyor_argv", "popen_conveyor"]


class Spawn(Protocol):
    """The ``spawn`` fixture (conftest.py): ``popen_conveyor``, with every process stopped at teardown."""

    def __call__(self, args: list[str], *, env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]: ...


def conveyor_argv(*args: str) -> list[str]:
    """The command line of ``conveyor <args>`` run by this test's Python."""
    return [sys.executable, "-m", "conveyor", *args]


def clean_env(url: str | None = None) -> dict[str, str]:
    """This process's environment without any ``CONVEYOR_*`` variable; with ``CONVEYOR_URL=url`` if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    if url is not None:
        env["CONVEYOR_URL"] = url
    return env


def popen_conveyor(args: list[str], *, env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start ``conveyor <args>`` in the background, its stdout and stderr piped as text."""
    return subprocess.Popen(
        conveyor_argv(*args), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
