"""The worker and the garbage collector: a task's objects are freed when it ends, and the heap that
was alive when the worker started is kept out of collections while it runs (``freeze_heap``)."""

from __future__ import annotations

import gc
import threading

import pytest

from conveyor import Conveyor, TaskContext, WorkerConfig
from conveyor.worker.args import config_from_args, config_to_args, parse

from .conftest import Start


def collect_all() -> None:
    """Collect until nothing is left: freeing an earlier test's cycles can run finalizers that make
    new ones (a Redis Cluster client's objects: 10,115, then 3,800, then 0), which are not this test's."""
    for _ in range(10):
        if gc.collect() == 0:
            return


def test_a_finished_task_leaves_no_cyclic_garbage(live_app: Conveyor) -> None:
    """Everything a task's run makes (record, context, job, outcome) is freed by reference counting:
    a cycle would keep hundreds of held tasks' objects alive until the collector's next full pass."""

    @live_app.task
    def lengthen(ctx: TaskContext, n: int) -> int:
        ctx.extend(30.0)  # the context's call back to the broker (once the source of a cycle)
        return n + 1

    handles = [lengthen.enqueue(i) for i in range(6)]
    worker = live_app.worker()
    assert worker.process_next()  # warms up per-name caches, which live on
    collect_all()
    gc.disable()
    try:
        for _ in range(5):
            assert worker.process_next()
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0
    assert [h.result(timeout=1) for h in handles] == [1, 2, 3, 4, 5, 6]


def test_worker_freezes_the_heap_while_it_runs(live_app: Conveyor, start_worker: Start) -> None:
    before = gc.get_freeze_count()
    made_before = ["alive when the worker starts"]
    worker = start_worker(freeze_heap=True)
    assert gc.get_freeze_count() > before
    assert not any(o is made_before for o in gc.get_objects())  # in the permanent generation: skipped
    worker.stop()
    assert worker.runtime is not None
    assert worker.runtime.stopped.wait(10)
    assert gc.get_freeze_count() == 0  # unfrozen at stop: collected as usual again
    assert any(o is made_before for o in gc.get_objects())


def test_freeze_heap_can_be_turned_off(live_app: Conveyor, start_worker: Start) -> None:
    gc.unfreeze()
    seen: list[int] = []
    ran = threading.Event()

    @live_app.task
    def look() -> None:
        seen.append(gc.get_freeze_count())
        ran.set()

    look.enqueue()
    start_worker(freeze_heap=False)
    assert ran.wait(5)
    assert seen == [0]


def test_freeze_heap_setting_reaches_child_processes_and_env() -> None:
    off = WorkerConfig(freeze_heap=False)
    assert "--no-freeze-heap" in config_to_args(off)
    assert config_from_args(parse(["pkg:app", *config_to_args(off)]), WorkerConfig()).freeze_heap is False
    assert config_from_args(parse(["pkg:app", *config_to_args(WorkerConfig())]), WorkerConfig()).freeze_heap is True
    assert WorkerConfig.from_env({"CONVEYOR_WORKER_FREEZE_HEAP": "0"}).freeze_heap is False
    with pytest.raises(TypeError):
        WorkerConfig(freeze_heap=1)  # type: ignore[arg-type]
