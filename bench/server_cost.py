"""The Redis broker's server cost in instructions, counted by callgrind: nearly the same every run.

    .venv/bin/python -m bench.server_cost [--tasks 10000] [--singles 1000] [--server valkey|redis-server]
                                          [--layout 4|5] [--cluster] [--namespace NS]
                                          [--partitions N] [--per-task-ids]

Timings on this shared machine move by 40% between runs, which hides a 5% change in a script. This
runs a private server under ``valgrind --tool=callgrind`` (it counts the instructions the server
executes, whatever else the machine is doing), drives the broker through a fixed sequence of
operations and has callgrind dump its counters after each (``callgrind_control --dump``), so each
phase's count is that phase's alone: server instructions per task for a one-task enqueue, a batch
enqueue, a batch claim (500 per call) and its settles, a one-task claim and a one-task settle, then
one-task and batch enqueues whose tasks hold unique keys, then an idle worker's claim (nothing
pending, a scheduled task in the slot: it reads the first due time), a claim of 100, one-task
settles of a retry and an operator's cancels, batch enqueues of 500 tasks into a queue in
:data:`PARTS` partitions (a call per partition on a cluster, one joined call on one server), one-task
``get``s by a generated id and by a custom id (``get.lua``), and last claims over 3 plain queues (one
joined call on one server): idle (a task due later in each), then of one task, in the third; PING is
the floor. Kernel time (the socket calls) is not in the counts. Compare two versions of the Lua code
by running this on each: the counts repeat to within ~2% (a sorted set's skip-list levels are
random, so its inserts vary a little from run to run). ``--cluster`` runs the server
cluster-enabled, serving every slot alone: against the same run without it, what cluster mode costs
a command (slot checks, per-slot dictionaries). The partitioned queue's phase labels each batch's ids
as an app's ``enqueue_many`` does (``batch_id_suffixes``: the 500 tasks to one partition, the next in
rotation); ``--per-task-ids`` labels them one partition per
task in rotation instead, every batch spread over the 6 (what ran before that rule).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import redis

from bench.bench_redis import task as bench_task
from conveyor.brokers.redis import RedisBroker
from conveyor.brokers.redis.config import RedisConfig
from conveyor.brokers.redis.keys import Keys
from conveyor.model import BrokerPolicy, NewTask, Outcome, QueueSettings, TaskRecord
from conveyor.testing.redis_cluster import SLOTS
from conveyor.testing.redis_server import find_server_binary, free_port

__all__ = ["PHASES", "available", "measure"]

#: The phases, in the order they run: (name, what one unit is).
PHASES = (
    ("ping", "PING"),
    ("enqueue_one", "one-task enqueue"),
    ("enqueue_batch", "task of a batch enqueue"),
    ("claim_batch", "task of a 500-task claim"),
    ("settle_batch", "outcome of a 500-outcome settle"),
    ("claim_one", "one-task claim"),
    ("settle_one", "one-outcome settle"),
    ("enqueue_one_unique", "one-task enqueue with a unique key"),
    ("enqueue_batch_unique", "task of a batch enqueue, each with a unique key"),
    ("claim_idle", "one-task claim finding nothing, a task due later in its slot"),
    ("claim_hundred", "task of a 100-task claim"),
    ("settle_retry_one", "one-outcome settle of a retry due in 5 s"),
    ("cancel_one", "operator's cancel of a scheduled task"),
    ("enqueue_batch_parts", "task of a 500-task enqueue into a queue in 6 partitions"),
    ("get_one", "get of a pending task by a generated id"),
    ("get_custom", "get of a pending task by a custom id"),
    ("claim_idle_three", "claim of 3 plain queues finding nothing, a task due later in each"),
    ("claim_third", "one-task claim of 3 plain queues, the task in the third"),
)
#: The queues the phases use (``--partitions`` splits each).
QUEUES = ("warm", "one", "batch", "uone", "ubatch", "idle", "hundred", "admin", "read")
#: The queues of the last two phases, in claim order: plain whatever ``--partitions`` says.
THREE = ("three_a", "three_b", "three_c")
CLAIM_BATCH = 500
CLAIM_HUNDRED = 100
#: Partitions of the queue of the last phase, and its tasks per enqueue call (an app's batch).
PARTS = 6
PARTS_BATCH = 500


def available() -> bool:
    """True if valgrind and callgrind_control are on PATH."""
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def _complete(records: list[TaskRecord]) -> list[Outcome]:
    """What a worker sends for a no-op task: its None result is not stored (``outcomes.complete``)."""
    return [Outcome(r.id, r.lease_token or "", "complete") for r in records]


def _retry(record: TaskRecord) -> Outcome:
    """A failed execution retried in 5 s, as a backoff makes it (``outcomes.failure``)."""
    return Outcome(record.id, record.lease_token or "", "retry", error="E: x", run_at=time.time() + 5, max_retries=3)


def _unique(new: NewTask) -> NewTask:
    """``new`` holding a unique key of its own (its id) for ten minutes, as ``unique_for=600`` makes it."""
    return replace(new, unique_key=new.id, unique_until=time.time() + 600)


def _counts(directory: Path) -> dict[str, int]:
    """Instructions per dump, by the name each dump was given."""
    counts: dict[str, int] = {}
    for path in directory.glob("cg.*"):
        text = path.read_text(errors="replace")
        name = re.search(r"^desc: Trigger: dump (\S+)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if name and total:
            counts[name.group(1)] = int(total.group(1))
    return counts


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout  # the server starts ~50x slower under valgrind
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server under valgrind exited with {proc.returncode}")
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # polling a starting process, not waiting for a result
    finally:
        client.close()


def _serve_every_slot(port: int, timeout: float = 60.0) -> None:
    """Give the cluster-enabled server on ``port`` every slot and wait for ``cluster_state:ok``."""
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    try:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + timeout
        while client.cluster("INFO").get("cluster_state") != "ok":
            if time.monotonic() > deadline:
                raise RuntimeError("the one-node cluster did not reach cluster_state:ok")
            time.sleep(0.2)  # polling a server that converges by itself
    finally:
        client.close()


def measure(
    tasks: int = 10_000,
    singles: int = 1_000,
    server: str | None = None,
    layout: int = 5,
    cluster: bool = False,
    namespace: str = "cost",
    partitions: int = 1,
    per_task_ids: bool = False,
) -> dict[str, float]:
    """Server instructions per unit of each phase (see :data:`PHASES`), counted by callgrind, with the
        keys of ``layout`` (5, what runs, or 4, what the version before stored:
        :class:`~conveyor.brokers.redis.keys.Keys`); with ``cluster``, on a cluster-enabled server that
        serves every slot alone (a one-master cluster, reached by a ``redis+cluster://`` URL): what cluster
        mode costs per command, apart from the spread over masters. ``namespace`` is in every key and hash
    tag: a cluster-enabled server hashes the tag once per command, so its length shows there. With
    ``partitions`` above 1 (layout 5), every queue of the run is split so (``configure_queue``)."""
    if not available():
        raise RuntimeError("valgrind (with callgrind_control) is not installed")
    with tempfile.TemporaryDirectory(prefix="conveyor-cg-") as tmp:
        out = Path(tmp)
        port = free_port()
        clustered = ["--cluster-enabled", "yes", "--cluster-port", str(free_port()),
                     "--cluster-config-file", f"{tmp}/nodes.conf"] if cluster else []  # fmt: skip
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", find_server_binary(server),
             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp,
             *clustered],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_ready(port, proc)
            if cluster:
                _serve_every_slot(port)
            where = f"redis+cluster://127.0.0.1:{port}/" if cluster else f"redis://127.0.0.1:{port}/0"
            config = RedisConfig.from_url(f"{where}?namespace={namespace}")
            broker = RedisBroker(config, BrokerPolicy(), keys=Keys(config.namespace) if layout == 4 else None)
            try:
                if partitions > 1:
                    for queue in QUEUES:
                        broker.configure_queue(QueueSettings(queue, partitions=partitions))
                units = _run_phases(broker, proc.pid, tasks, singles, per_task_ids)
            finally:
                broker.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        counts = _counts(out)
    missing = [name for name, _ in PHASES if name not in counts]
    if missing:
        raise RuntimeError(f"callgrind wrote no counts for {missing}")
    return {name: counts[name] / units[name] for name, _ in PHASES}


def _run_phases(broker: RedisBroker, pid: int, tasks: int, singles: int, per_task_ids: bool = False) -> dict[str, int]:
    """Run every phase, dumping the counters after each: units per phase."""

    def dump(name: str) -> None:
        subprocess.run(["callgrind_control", "--dump=" + name, str(pid)], check=True, capture_output=True)

    def each(name: str, count: int, step: Callable[[int], object]) -> None:
        for i in range(count):
            step(i)
        dump(name)

    suffix = broker.id_suffixes()

    def task(i: int, queue: str, labels: Callable[[str], str] | None = suffix) -> NewTask:
        """A bench task, its id as the app makes one: with ``~<label>`` where ids route by it."""
        new = bench_task(i, queue)
        return new if labels is None else replace(new, id=new.id + labels(queue))

    def parts_batch(b: int) -> None:
        labels = suffix if per_task_ids else broker.batch_id_suffixes(PARTS_BATCH)
        broker.enqueue([task(b * PARTS_BATCH + i, "parts", labels) for i in range(PARTS_BATCH)], time.time())

    client = broker.client
    broker.enqueue([task(-1, "warm"), task(-2, "warm")], time.time())  # loads the library
    broker.settle(_complete(broker.claim(["warm"], time.time(), 60.0, limit=2)), time.time())
    dump("warmup")
    each("ping", singles, lambda _: client.ping())
    each("enqueue_one", singles, lambda i: broker.enqueue([task(i, "one")], time.time()))
    broker.enqueue([task(i, "batch") for i in range(tasks)], time.time())
    dump("enqueue_batch")
    claimed: list[TaskRecord] = []
    while len(claimed) < tasks:
        got = broker.claim(["batch"], time.time(), 60.0, limit=CLAIM_BATCH)
        if not got:
            raise RuntimeError(f"claimed {len(claimed)} of {tasks}")
        claimed += got
    dump("claim_batch")
    for start in range(0, tasks, CLAIM_BATCH):
        broker.settle(_complete(claimed[start : start + CLAIM_BATCH]), time.time())
    dump("settle_batch")
    ones: list[TaskRecord] = []
    each("claim_one", singles, lambda _: ones.extend(broker.claim(["one"], time.time(), 60.0, limit=1)))
    if len(ones) != singles:
        raise RuntimeError(f"claimed {len(ones)} of {singles} one by one")
    each("settle_one", singles, lambda i: broker.settle(_complete(ones[i : i + 1]), time.time()))
    each("enqueue_one_unique", singles, lambda i: broker.enqueue([_unique(task(i, "uone"))], time.time()))
    broker.enqueue([_unique(task(i, "ubatch")) for i in range(tasks)], time.time())
    dump("enqueue_batch_unique")
    broker.enqueue([replace(task(-3, "idle"), run_at=time.time() + 3600)], time.time())  # due in an hour
    idle: list[TaskRecord] = []
    each("claim_idle", singles, lambda _: idle.extend(broker.claim(["idle"], time.time(), 60.0, limit=1)))
    if idle:
        raise RuntimeError("the idle claim took a task")
    hundreds = CLAIM_HUNDRED * max(1, singles // CLAIM_HUNDRED)
    broker.enqueue([task(i, "hundred") for i in range(hundreds)], time.time())
    dump("enqueue_hundred")
    held: list[TaskRecord] = []
    each(
        "claim_hundred",
        hundreds // CLAIM_HUNDRED,
        lambda _: held.extend(broker.claim(["hundred"], time.time(), 60.0, limit=CLAIM_HUNDRED)),
    )
    if len(held) != hundreds:
        raise RuntimeError(f"claimed {len(held)} of {hundreds} a hundred at a time")
    retries = min(singles, hundreds)
    each("settle_retry_one", retries, lambda i: broker.settle([_retry(held[i])], time.time()))
    later = [replace(task(i, "admin"), run_at=time.time() + 3600) for i in range(singles)]
    broker.enqueue(later, time.time())
    dump("enqueue_admin")
    each("cancel_one", singles, lambda i: broker.cancel(later[i].id, time.time()))
    broker.configure_queue(QueueSettings("parts", partitions=PARTS))
    broker.enqueue([task(-4 - i, "parts") for i in range(PARTS)], time.time())  # registered in every slot
    dump("parts_ready")
    batches = max(1, tasks // PARTS_BATCH)
    each("enqueue_batch_parts", batches, parts_batch)
    read = [task(i, "read") for i in range(singles)]
    named = [replace(bench_task(i, "read"), id=f"named-{i}") for i in range(singles)]
    broker.enqueue(read + named, time.time())
    dump("enqueue_read")
    each("get_one", singles, lambda i: broker.get(read[i].id, time.time()))
    each("get_custom", singles, lambda i: broker.get(named[i].id, time.time()))
    broker.enqueue([replace(task(-10 - i, q), run_at=time.time() + 3600) for i, q in enumerate(THREE)], time.time())
    dump("three_ready")
    three: list[TaskRecord] = []
    each("claim_idle_three", singles, lambda _: three.extend(broker.claim(list(THREE), time.time(), 60.0, limit=1)))
    if three:
        raise RuntimeError("the idle claim of 3 queues took a task")
    broker.enqueue([task(i, THREE[2]) for i in range(singles)], time.time())
    dump("enqueue_third")
    each("claim_third", singles, lambda _: three.extend(broker.claim(list(THREE), time.time(), 60.0, limit=1)))
    if len(three) != singles:
        raise RuntimeError(f"claimed {len(three)} of {singles} from the third queue")
    return {
        "ping": singles,
        "enqueue_one": singles,
        "enqueue_batch": tasks,
        "claim_batch": tasks,
        "settle_batch": tasks,
        "claim_one": singles,
        "settle_one": singles,
        "enqueue_one_unique": singles,
        "enqueue_batch_unique": tasks,
        "claim_idle": singles,
        "claim_hundred": hundreds,
        "settle_retry_one": retries,
        "cancel_one": singles,
        "enqueue_batch_parts": batches * PARTS_BATCH,
        "get_one": singles,
        "get_custom": singles,
        "claim_idle_three": singles,
        "claim_third": singles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks of the batch phases")
    parser.add_argument("--singles", type=int, default=1_000, help="calls of the one-at-a-time phases")
    parser.add_argument("--server", default=None, help="valkey (default) or redis-server")
    parser.add_argument("--layout", type=int, choices=(4, 5), default=5, help="the keys' layout (4: one slot)")
    parser.add_argument("--cluster", action="store_true", help="a cluster-enabled server holding every slot")
    parser.add_argument("--namespace", default="cost", help="the namespace (in every key and hash tag)")
    parser.add_argument("--partitions", type=int, default=1, help="every queue in N partitions (layout 5)")
    parser.add_argument("--per-task-ids", action="store_true", help="the last phase's ids labelled per task")
    args = parser.parse_args()
    if args.partitions > 1 and args.layout == 4:
        parser.error("--partitions needs layout 5 (layout 4 keeps a queue in its one slot)")
    costs = measure(
        args.tasks,
        args.singles,
        args.server,
        args.layout,
        args.cluster,
        args.namespace,
        args.partitions,
        args.per_task_ids,
    )
    batches = f"{args.tasks} tasks in batches, {args.singles} one at a time"
    mode = ", cluster mode (one master)" if args.cluster else ""
    mode += f", every queue in {args.partitions} partitions" if args.partitions > 1 else ""
    print(f"server instructions (callgrind), layout {args.layout}{mode}, {batches}")
    for name, unit in PHASES:
        print(f"{costs[name]:12,.0f}  per {unit}  ({costs[name] / costs['ping']:.1f}x PING)")


if __name__ == "__main__":
    main()
