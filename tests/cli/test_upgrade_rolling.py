"""The upgrade from layout 4 with ``conveyor worker`` processes of both releases on one server.

The release before is the code as of the last commit where layout 4 was the default (the parent of
the commit that made :data:`~conveyor.brokers.redis.addressing.LAYOUT_KEYS` layout 5's), taken from
this repository's own history with ``git archive`` and run with ``PYTHONPATH``; without that history
the tests skip. Its producers (the app and the CLI) write the backlog: tasks pending, delayed, retrying
(a first attempt that fails), long enough to be running when the move comes, with custom ids and with
unique keys, results kept. Every run of a handler is noted by task id in keys outside the namespace.
A task may run twice only where docs/operations.md says so: a worker of the release before lost it
to the move (the outcome it reports for it is refused, or its heartbeat finds the lease gone; it logs
which, by id), and the task runs again when its lease expires; or a producer of the release before
stored its custom id again once its task moved (that second task runs at most once).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import pytest
import redis

from conveyor import Conveyor, TaskState
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.testing import poll_until

from .procs import clean_env, conveyor_argv

pytestmark = [pytest.mark.slow, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]

#: The line that made layout 5 the default; the release before is its first commit's parent.
DEFAULT_LINE = "LAYOUT_KEYS: type[Keys] = Keys5"

#: Short leases and quick services, for both releases (``CONVEYOR_WORKER_*``): a task whose lease
#: the release before lost runs again about 2 s later; the janitor moves layout 4's tasks every 0.3 s.
WORKER_ENV = {
    "CONVEYOR_WORKER_LEASE_FOR": "2",
    "CONVEYOR_WORKER_HEARTBEAT_INTERVAL": "0.4",
    "CONVEYOR_WORKER_REAPER_INTERVAL": "0.3",
    "CONVEYOR_WORKER_PROMOTER_INTERVAL": "0.2",
    "CONVEYOR_WORKER_JANITOR_INTERVAL": "0.3",
    "CONVEYOR_WORKER_POLL_INTERVAL": "0.1",
    "CONVEYOR_WORKER_REGISTRY_INTERVAL": "0.5",
    "CONVEYOR_WORKER_SHUTDOWN_GRACE": "15",
}

#: What a worker (of either release) logs for a task whose outcome it could not write: the lease lost
#: (its heartbeat found no lease), or the settle refused (fenced).
LOST = re.compile(r"task lease-lost task_id=(\S+)|task (\S+) \(\w+\): lease lost before \w+ was written")


def _old_release(dest: Path) -> Path | None:
    """The release before's ``src`` extracted under ``dest`` from this repository's history, or None."""
    git = shutil.which("git")
    if git is None:
        return None
    where = "src/conveyor/brokers/redis/addressing.py"
    argv = [git, "-C", str(ROOT), "log", "--reverse", "--format=%H", "-S", DEFAULT_LINE, "--", where]
    log = subprocess.run(argv, capture_output=True, text=True)
    commits = log.stdout.split()
    if log.returncode != 0 or not commits:
        return None
    archive = subprocess.run([git, "-C", str(ROOT), "archive", commits[0] + "^", "src"], capture_output=True)
    if archive.returncode != 0:  # a shallow clone: the parent is not there
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


@pytest.fixture(scope="module")
def old_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = _old_release(tmp_path_factory.mktemp("old-release"))
    if src is None:
        pytest.skip("the release before (layout 4) needs this repository's git history, which is unavailable")
    return src


APP = """
import os
import time

import conveyor
import redis
from conveyor import Conveyor, Fixed, TaskContext

app = Conveyor({url!r})
counts = redis.Redis.from_url({server!r})
SIDE = os.environ["UPGRADE_SIDE"]
counts.hset({where!r}, f"{{SIDE}} {{os.getpid()}}", os.path.dirname(conveyor.__file__))


def ran(ctx: TaskContext) -> None:
    pipe = counts.pipeline(transaction=False)
    pipe.hincrby({runs!r}, ctx.task_id, 1)
    pipe.rpush({log!r}, f"{{SIDE}} {{ctx.task_id}} {{ctx.attempt}}")
    pipe.execute()


@app.task(name="job")
def job(ctx: TaskContext, n: int, seconds: float = 0.0) -> int:
    time.sleep(seconds)
    ran(ctx)
    return 2 * n


@app.task(name="flaky", max_retries=3, backoff=Fixed(5.0))
def flaky(ctx: TaskContext, n: int) -> int:
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    ran(ctx)
    return 2 * n
"""

# argv: the file the ids go to (JSON: id -> result), the first n. The backlog in every state a
# producer makes: pending (short, and long enough to be running when the move comes), delayed,
# retrying (flaky's first attempt fails), custom ids, unique keys.
BACKLOG = """
import json, sys
from upgrade_app import app, job, flaky

out, base = sys.argv[1], int(sys.argv[2])
want = {}
def add(handles, ns):
    for handle, n in zip(handles, ns, strict=True):
        want[handle.id] = 2 * n
ns = range(base + 3000, base + 3200)
add(flaky.enqueue_many([((n,), {}) for n in ns]), ns)
ns = range(base, base + 1500)
add(job.enqueue_many([((n, 0.02), {}) for n in ns]), ns)
ns = range(base + 1500, base + 1560)
add(job.enqueue_many([((n, 0.3), {}) for n in ns]), ns)
ns = range(base + 2000, base + 2200)
add(app.enqueue_many("job", [((n,), {}) for n in ns], delay=8.0), ns)
for n in range(base + 4000, base + 4100):
    want[app.enqueue("job", [n], task_id=f"order-{n}").id] = 2 * n
for n in range(base + 5000, base + 5100):
    want[app.enqueue("job", [n], unique_key=f"u-{n}", unique_for=600).id] = 2 * n
with open(out, "w") as file:
    json.dump(want, file)
"""

# argv: the file the ids go to (a JSON line per batch: id -> result), the file of the custom ids it
# enqueued again, the stop file, the first n. Until the stop file exists, about every 50 ms: a batch of
# 20 tasks, and one of the backlog's custom ids again (with other arguments), as a producer retrying
# a webhook would: refused as a duplicate while layout 4 holds its task, stored once it moved (the
# version before cannot see layout 5).
TRICKLE = """
import json, os, sys, time
from conveyor import DuplicateTask
from upgrade_app import app, job

out, again, stop, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
k = 0
with open(out, "a", buffering=1) as file, open(again, "a", buffering=1) as stored:
    while not os.path.exists(stop):
        handles = job.enqueue_many([((m,), {}) for m in range(n, n + 20)])
        file.write(json.dumps({h.id: 2 * m for h, m in zip(handles, range(n, n + 20), strict=True)}) + "\\n")
        n += 20
        try:
            stored.write(app.enqueue("job", [-1], task_id=f"order-{4000 + k % 100}").id + "\\n")
        except DuplicateTask:
            pass
        k += 1
        time.sleep(0.05)
"""


@dataclass
class Upgrade:
    """A namespace on the session's server, the app both releases run, and every process started."""

    url: str
    workdir: Path
    old_src: Path
    client: redis.Redis
    namespace: str
    procs: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    @property
    def runs(self) -> str:
        return f"test-runs:{self.namespace}"

    def env(self, side: str) -> dict[str, str]:
        path = [str(self.old_src if side == "old" else ROOT / "src"), str(self.workdir)]
        return clean_env(self.url) | WORKER_ENV | {"UPGRADE_SIDE": side, "PYTHONPATH": os.pathsep.join(path)}

    def start(self, side: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """``argv`` run by ``side``'s release in the work directory, its output in a log file."""
        log = self.workdir / f"{side}-{len(self.procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=self.env(side), cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append((proc, log))
        return proc

    def worker(self, side: str) -> subprocess.Popen[bytes]:
        """A ``conveyor worker`` of ``side``'s release; the release before's runs 4 tasks at once, so
        that its backlog lasts until this release's workers start."""
        return self.start(side, conveyor_argv("worker", "upgrade_app:app", "-c", "4" if side == "old" else "10"))

    def run(self, side: str, argv: list[str]) -> str:
        """``argv`` run to its end by ``side``'s release: its output (it must succeed)."""
        done = subprocess.run(argv, env=self.env(side), cwd=self.workdir, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def backlog(self, base: int) -> dict[str, int]:
        """The backlog the release before's app writes: id -> the result its task returns."""
        out = self.workdir / f"backlog-{base}.json"
        self.run("old", [sys.executable, "-c", BACKLOG, str(out), str(base)])
        return cast("dict[str, int]", json.loads(out.read_text()))

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM, then wait for a graceful stop (status 0)."""
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.returncode == 0, self.log(proc)[-2000:]

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return next(log for p, log in self.procs if p is proc).read_text(errors="replace")

    def assert_completed(self, want: dict[str, int]) -> None:
        """Every task of ``want`` completed with its result, read by id by this release's app (the last
        outcomes may still be on their way when the last handler returned)."""
        app = Conveyor(self.url)
        try:

            def wrong() -> dict[str, tuple[str, object]]:
                infos = {task_id: app.get(task_id) for task_id in want}
                return {
                    task_id: (info.state, info.result)
                    for task_id, info in infos.items()
                    if (info.state, info.result) != (TaskState.COMPLETED, want[task_id])
                }

            poll_until(lambda: not wrong(), timeout=10, interval=0.2, message=lambda: f"every result: {wrong()}")
        finally:
            app.close()

    def wait_for_runs(self, want: dict[str, int]) -> None:
        """Until every task of ``want`` ran at least once."""
        poll_until(
            lambda: set(self.client.hkeys(self.runs)) >= set(want),
            timeout=60,
            interval=0.1,
            message=lambda: f"every task run: {len(set(self.client.hkeys(self.runs)) & set(want))} of {len(want)}",
        )

    def logs(self) -> list[str]:
        """Every worker's log so far."""
        return [log.read_text(errors="replace") for _, log in self.procs]

    def runs_beyond(self, explained: dict[str, int]) -> dict[str, list[str]]:
        """The tasks that ran more often than once plus ``explained[id]``, each with its runs (release,
        attempt) and the lines of the workers' logs that name it."""
        runs: dict[str, list[str]] = {}
        for entry in cast("list[str]", self.client.lrange(f"test-log:{self.namespace}", 0, -1)):
            side, task_id, attempt = entry.split(" ")
            runs.setdefault(task_id, []).append(f"run by {side}, attempt {attempt}")
        logs = self.logs()
        return {
            task_id: said + [line for text in logs for line in text.splitlines() if task_id in line]
            for task_id, said in runs.items()
            if len(said) > 1 + explained.get(task_id, 0)
        }

    def layout4_states(self) -> dict[str, int]:
        """How many tasks layout 4 holds in each state (queue ``default``)."""
        prefix = Keys(self.namespace).prefix + "q:default:"
        states = ("pending", "scheduled", "retry", "active", "completed")
        return {state: int(self.client.zcard(prefix + state)) for state in states}

    def wait_for_layout4_gone(self) -> None:
        """Until a janitor deleted layout 4's last keys (its tick after the move emptied it)."""
        poll_until(lambda: not self.layout4_left(), timeout=30, message=lambda: f"layout 4 gone: {self.layout4_left()}")

    def layout4_left(self) -> list[str]:
        """Layout 4's keys left but those that expire by themselves: the answers its enqueues kept for
        a repeat and the per-minute counts of tasks settled before they moved (not carried over)."""
        found = cast("list[str]", self.client.keys("{" + self.namespace + "}:v4:*"))
        return [key for key in found if not ((":v4:sent:" in key or ":v4:h:" in key) and self.client.ttl(key) > 0)]

    def close(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def upgrade(tmp_path: Path, old_src: Path, redis_url: str) -> Iterator[Upgrade]:
    namespace = RedisConfig.from_url(redis_url).namespace
    server = urlsplit(redis_url)._replace(query="").geturl()
    client = redis.Redis.from_url(server, decode_responses=True)
    keys = {"runs": f"test-runs:{namespace}", "log": f"test-log:{namespace}", "where": f"test-where:{namespace}"}
    (tmp_path / "upgrade_app.py").write_text(APP.format(url=redis_url, server=server, **keys))
    state = Upgrade(redis_url, tmp_path, old_src, client, namespace)
    try:
        yield state
    finally:
        state.close()
        client.delete(*keys.values())
        client.close()


def lost_in(logs: list[str]) -> set[str]:
    """The ids whose lease a worker lost, or whose outcome it could not write, as its log says."""
    return {a or b for text in logs for a, b in LOST.findall(text)}


def errors_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]


@pytest.mark.timeout(120)
def test_old_workers_stopped_then_new_ones_run_every_task_once(upgrade: Upgrade) -> None:
    """The documented procedure: the release before's workers drain part of the backlog its app and
    its CLI wrote, and stop (SIGTERM: they finish what they run and put back what they prefetched); then
    this release's workers, on a namespace only layout 4 holds, run the rest while their janitor moves
    it, no step between: every task once (twice only if a lease expired, which its worker logs), every
    result found by id, layout 4's keys gone."""
    want = upgrade.backlog(0)
    calls = upgrade.workdir / "calls.jsonl"
    calls.write_text("".join(json.dumps({"args": [n]}) + "\n" for n in range(9000, 9300)))
    enqueued = json.loads(upgrade.run("old", conveyor_argv("--json", "enqueue", "job", "--file", str(calls))))
    want |= {task_id: 2 * n for task_id, n in zip(enqueued["ids"], range(9000, 9300), strict=True)}
    assert upgrade.client.keys("{" + upgrade.namespace + "*:v5:*") == []  # the release before wrote it all

    old = [upgrade.worker("old") for _ in range(2)]
    poll_until(lambda: upgrade.client.hlen(upgrade.runs) >= 150, timeout=30, message="the old workers running")
    for proc in old:
        upgrade.stop(proc)
    held = upgrade.layout4_states()
    assert held["active"] == 0 and all(held[state] for state in held if state != "active"), held
    where = cast("dict[str, str]", upgrade.client.hgetall(f"test-where:{upgrade.namespace}"))
    assert {path for side, path in where.items() if side.startswith("old")} == {str(upgrade.old_src / "conveyor")}

    new = [upgrade.worker("new") for _ in range(2)]
    upgrade.wait_for_runs(want)
    upgrade.assert_completed(want)
    assert upgrade.runs_beyond(dict.fromkeys(lost_in(upgrade.logs()), 1)) == {}
    upgrade.wait_for_layout4_gone()
    for proc in new:
        upgrade.stop(proc)
    assert [errors_in(text) for text in upgrade.logs()] == [[]] * 4


@pytest.mark.timeout(120)
def test_old_and_new_workers_together_lose_no_task(upgrade: Upgrade) -> None:
    """A rolling upgrade: this release's workers start while the release before's run and its producer
    enqueues, through and after the move; then the old ones stop. Every task completes, its result found
    by id, and layout 4 ends empty. A task runs twice only where documented: a worker of the release
    before lost it to the move (its lease, or its outcome refused; it logs which), or that release's
    producer stored its custom id again once its task moved (that second task runs at most once, then
    the move drops it)."""
    want = upgrade.backlog(0)
    old = [upgrade.worker("old") for _ in range(2)]
    poll_until(lambda: upgrade.client.hlen(upgrade.runs) >= 100, timeout=30, message="the old workers running")
    trickled, again, stop = (upgrade.workdir / name for name in ("trickle.jsonl", "again.txt", "stop"))
    producer = upgrade.start("old", [sys.executable, "-c", TRICKLE, str(trickled), str(again), str(stop), "100000"])
    new = [upgrade.worker("new") for _ in range(2)]
    held = upgrade.layout4_states()
    assert held["active"] and held["pending"], held  # the old workers hold tasks as the new ones start

    def batches() -> int:
        return len(trickled.read_text().splitlines()) if trickled.exists() else 0

    def moved() -> bool:
        return any("layout 4's data moved" in upgrade.log(proc) for proc in new)

    poll_until(moved, timeout=30, message="the move to end once")
    written = batches()
    poll_until(lambda: batches() >= written + 20, timeout=30, message="20 batches more from the old producer")
    stop.touch()
    assert producer.wait(timeout=30) == 0, upgrade.log(producer)
    for line in trickled.read_text().splitlines():
        want |= json.loads(line)
    for proc in old:
        upgrade.stop(proc)

    upgrade.wait_for_runs(want)
    upgrade.assert_completed(want)
    explained = dict.fromkeys(lost_in(upgrade.logs()), 1)
    for task_id in again.read_text().split():
        explained[task_id] = explained.get(task_id, 0) + 1
    assert upgrade.runs_beyond(explained) == {}
    upgrade.wait_for_layout4_gone()
    for proc in new:
        upgrade.stop(proc)
    assert [errors_in(text) for text in upgrade.logs()] == [[]] * 5
