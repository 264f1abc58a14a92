"""Soak run: 4 workers under a steady load, a random SIGKILL or SIGSTOP/SIGCONT every few seconds.

    python bench/soak.py [--minutes 10] [--url sqlite:///soak.db | --redis] [--rate 20] [--workers 4]

``--redis`` starts a private server (AOF on, free loopback port) for the run and stops it at the end.

Reports tasks enqueued / completed / lost (not completed at the end), duplicate executions (at-least-once
allows them after a kill or a long pause), recovery chaos counts, and the RSS growth of the workers that
lived through the whole run (worker 0 is never a chaos victim, so at least it does). Not run in CI.
This file is also the workers' app (``soak:app``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conveyor import BrokerPolicy, Conveyor, TaskState

app = Conveyor(policy=BrokerPolicy(max_stalls=50))  # chaos must not archive innocent tasks as poison


@app.task(max_retries=10)
def job(key: str, seconds: float) -> None:
    time.sleep(seconds)
    fd = os.open(os.environ["SOAK_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--url", default=None)
    parser.add_argument("--rate", type=float, default=20.0, help="tasks enqueued per second")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis", action="store_true", help="run on a private Redis-compatible server")
    ns = parser.parse_args()
    if ns.redis:
        from conveyor.testing.redis_server import RedisServer

        with RedisServer(appendonly=True) as server:
            return soak(ns, server.namespace_url("soak"))
    return soak(ns, ns.url)


def soak(ns: argparse.Namespace, url: str | None) -> int:
    rng = random.Random(ns.seed)
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-soak-"))
    url = url or f"sqlite:///{workdir / 'soak.db'}"
    ledger = workdir / "ledger.txt"
    env = dict(os.environ, CONVEYOR_URL=url, SOAK_LEDGER=str(ledger))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "conveyor.worker", "soak:app", "--log-level", "WARNING", "--concurrency", "4"]
    argv += ["--lease", "2", "--heartbeat", "0.5", "--reaper-interval", "0.5", "--poll-interval", "0.1"]
    log = open(workdir / "workers.log", "ab")  # noqa: SIM115

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    producer = Conveyor(url)
    workers = [spawn() for _ in range(ns.workers)]
    first = {w.pid: (time.monotonic(), 0) for w in workers}
    kills = pauses = 0
    ids: list[str] = []
    try:
        start = time.monotonic()
        end = start + ns.minutes * 60
        next_chaos = start + rng.uniform(2, 5)
        warm = False
        while time.monotonic() < end:
            ids.append(producer.enqueue("job", args=[f"t{len(ids)}", rng.uniform(0, 0.2)]).id)
            now = time.monotonic()
            if not warm and now - start > 10:
                first = {w.pid: (now, rss_kib(w.pid)) for w in workers if w.poll() is None}
                warm = True
            if now >= next_chaos:
                i = rng.randrange(1, len(workers)) if len(workers) > 1 else 0  # worker 0: the RSS witness
                victim = workers[i]
                if rng.random() < 0.5:
                    victim.kill()
                    victim.wait()
                    workers[i] = spawn()
                    kills += 1
                else:
                    victim.send_signal(signal.SIGSTOP)
                    time.sleep(rng.uniform(0.5, 6.0))  # the pause is the fault (up to 3x the lease)
                    victim.send_signal(signal.SIGCONT)
                    pauses += 1
                next_chaos = time.monotonic() + rng.uniform(2, 5)
            time.sleep(1.0 / ns.rate)
        survivors = [(w.pid, first[w.pid][1], rss_kib(w.pid)) for w in workers if w.pid in first and warm]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = producer.stats().get("default", {})
            if counts.get("completed", 0) >= len(ids):
                break
            time.sleep(0.5)
        states: dict[str, int] = {}
        for task_id in ids:
            state = producer.get(task_id).state
            states[state.value] = states.get(state.value, 0) + 1
        done = ledger.read_text().split("\n") if ledger.exists() else []
        keys = [line.split()[0] for line in done if line]
        duplicates = len(keys) - len(set(keys))
        lost = len(ids) - states.get(TaskState.COMPLETED.value, 0)
        print(f"minutes={ns.minutes} url={url.split('?')[0]} workers={ns.workers} rate={ns.rate}/s")
        print(f"enqueued={len(ids)} states={states} lost={lost} duplicates={duplicates}")
        print(f"chaos: kills={kills} pauses={pauses}")
        for pid, before, after in survivors:
            print(f"worker {pid}: RSS {before} KiB -> {after} KiB ({after - before:+d} KiB)")
        return 0 if lost == 0 else 1
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGCONT)
                w.terminate()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        log.close()
        producer.close()


if __name__ == "__main__":
    sys.exit(main())
