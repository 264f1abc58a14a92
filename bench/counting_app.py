"""The no-op app the SQLite process benchmarks start workers on; each worker process counts its tasks.

``bench.sqlite_worker`` and ``bench.sqlite_procs`` write it as ``tasks.py`` beside the database,
start ``python -m conveyor worker tasks:app`` there (as a user does) and read back, per process, how
many tasks it ran (written as the process exits), which gives the shares between processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conveyor import Conveyor
from conveyor.brokers.capabilities import KeepsHistory

__all__ = ["completed", "shares", "start_worker", "write_app"]

_TASKS_PY = """
import atexit
import os

from conveyor import Conveyor

app = Conveyor({url!r})
done = 0


@app.task
def noop() -> None:
    global done
    done += 1


@atexit.register
def _count() -> None:
    if done:
        with open(os.path.join({directory!r}, f"done-{{os.getpid()}}"), "w") as file:
            file.write(str(done))
"""


def write_app(directory: Path, url: str) -> None:
    """Write ``tasks.py`` (the counting no-op app on ``url``) into ``directory``."""
    (directory / "tasks.py").write_text(_TASKS_PY.format(url=url, directory=str(directory)))


def start_worker(
    directory: Path, args: list[str], number: int = 0, *, new_session: bool = False
) -> subprocess.Popen[bytes]:
    """``python -m conveyor worker tasks:app ARGS`` in ``directory``, its output in ``worker<number>.log``
    (a file, not a pipe: the default log level writes a line per task)."""
    command = [sys.executable, "-m", "conveyor", "worker", "tasks:app", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), *sys.path])}
    with (directory / f"worker{number}.log").open("wb") as log:
        return subprocess.Popen(command, cwd=directory, env=env, stdout=log, stderr=log, start_new_session=new_session)


def shares(directory: Path) -> list[int]:
    """How many tasks each worker process that ran any ran, largest first."""
    return sorted((int(path.read_text()) for path in directory.glob("done-*")), reverse=True)


def completed(app: Conveyor) -> int:
    """Tasks completed in all queues of ``app``'s broker, from its per-minute history counters.

    A few rows, read in microseconds: counting the tasks table by state (``broker.queues``) took 7-8 ms
    of CPU at 20,000 tasks, and polled every 5 ms it took most of a core from the workers it timed."""
    broker = app.broker
    assert isinstance(broker, KeepsHistory), "the SQLite broker keeps per-minute history"
    return sum(minute.completed for minute in broker.history(0, 2**62))
