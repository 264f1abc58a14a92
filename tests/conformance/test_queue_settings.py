"""Queue settings live in the broker: max_size, concurrency, aging, paused, partitions."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, QueueFull, TaskState, Worker


@pytest.fixture
def noop(app: Conveyor) -> str:
    @app.task
    def noop(n: int = 0) -> int:
        return n

    return noop.name


def test_max_size_bounds_unfinished_tasks_and_a_full_queue_writes_nothing(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", max_size=2)
    app.enqueue(noop, args=[1])
    app.enqueue(noop, args=[2], delay=60)
    with pytest.raises(QueueFull):
        app.enqueue(noop, args=[3])
    assert app.stats()["default"]["total"] == 2


def test_finished_tasks_do_not_count_against_max_size(app: Conveyor, worker: Worker, noop: str) -> None:
    app.configure_queue("default", max_size=1)
    app.enqueue(noop)
    worker.process_next()
    app.enqueue(noop)
    assert app.stats()["default"]["completed"] == app.stats()["default"]["pending"] == 1


def test_a_batch_that_would_overflow_max_size_writes_nothing(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", max_size=2)
    with pytest.raises(QueueFull):
        app.enqueue_many(noop, [([n], {}) for n in range(3)])
    assert app.stats()["default"]["total"] == 0


@pytest.mark.parametrize(("partitions", "max_size", "count"), [(1, 700, 1200), (3, 1600, 2000)])
def test_a_long_batch_refused_names_exactly_the_tasks_it_stored(
    app: Conveyor, noop: str, partitions: int, max_size: int, count: int
) -> None:
    """Redis stores a batch 500 tasks per queue (partition) a call, so a later call's refusal keeps
    what the earlier ones stored; the refusal names exactly those, and ``on_enqueue`` hears of them.
    Elsewhere the batch writes nothing and names nothing: the same rule either way."""
    app.configure_queue("default", max_size=max_size, partitions=partitions)
    told: list[str] = []
    app.on_enqueue(lambda tasks: told.extend(task.id for task in tasks))
    with pytest.raises(QueueFull) as refused:
        app.enqueue_many(noop, [([n], {}) for n in range(count)])
    kept = {info.id: info.args[0] for info in app.inspect.list("default", TaskState.PENDING, limit=count)}
    assert sorted(refused.value.stored) == sorted(kept) == sorted(told)
    assert len(kept) == app.stats()["default"]["total"] <= max_size
    assert (f"{len(kept)} task(s) of the call stay stored" in str(refused.value)) is bool(kept)
    # in the calls' order, with their places: what to enqueue again is the rest
    assert [kept[task_id] for task_id in refused.value.stored] == list(refused.value.stored_calls)
    assert list(refused.value.stored_calls) == sorted(refused.value.stored_calls)


def test_max_size_of_one_queue_does_not_bound_another(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", max_size=1)
    app.enqueue(noop)
    app.enqueue(noop, queue="other")
    app.enqueue(noop, queue="other")
    assert app.stats()["other"]["total"] == 2


def test_concurrency_one_gives_a_single_active_queue(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", concurrency=1)
    app.enqueue(noop, args=[1])
    app.enqueue(noop, args=[2])
    first = app.claim()
    assert first is not None
    assert app.claim() is None
    first.complete(1)
    second = app.claim()
    assert second is not None and second.task.args == [2]


def test_concurrency_bounds_active_tasks_across_every_app_on_the_broker(
    app: Conveyor, producer: Conveyor, noop: str
) -> None:
    app.configure_queue("default", concurrency=2)
    for n in range(3):
        app.enqueue(noop, args=[n])
    assert app.claim() is not None
    assert producer.claim() is not None
    assert producer.claim() is None
    assert app.worker().process_next() is False
    assert app.stats()["default"]["active"] == 2


def test_concurrency_of_one_queue_does_not_limit_another(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", concurrency=1)
    app.enqueue(noop)
    app.enqueue(noop, queue="other")
    assert app.claim() is not None
    assert app.claim(queues=["default", "other"]) is not None


def test_settings_configured_by_one_app_apply_to_every_app_on_the_broker(
    app: Conveyor, producer: Conveyor, noop: str
) -> None:
    producer.configure_queue("default", max_size=1)
    app.enqueue(noop)
    with pytest.raises(QueueFull):
        app.enqueue(noop)


def test_paused_queue_is_not_claimed_until_resumed(app: Conveyor, worker: Worker, noop: str) -> None:
    app.inspect.pause("default")
    handle = app.enqueue(noop)
    assert worker.process_next() is False
    assert app.claim() is None
    app.inspect.resume("default")
    assert worker.process_next() is True
    assert app.get(handle.id).state is TaskState.COMPLETED


def test_pausing_one_queue_leaves_the_others_running(app: Conveyor, noop: str) -> None:
    app.inspect.pause("default")
    app.enqueue(noop)
    app.enqueue(noop, queue="other")
    assert app.worker(queues=["default", "other"]).run_until_idle() == 1


def test_inspector_reports_each_queues_settings_and_paused_flag(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", max_size=10, concurrency=2, aging=30.0)
    app.inspect.pause("default")
    (queue,) = app.inspect.queues()
    settings = queue.settings
    assert (settings.name, settings.max_size, settings.concurrency, settings.aging, settings.paused) == (
        "default",
        10,
        2,
        30.0,
        True,
    )


def test_reconfiguring_a_queue_keeps_it_paused(app: Conveyor) -> None:
    app.inspect.pause("default")
    app.configure_queue("default", max_size=5)
    assert app.inspect.queues()[0].settings.paused is True


def test_partitions_are_one_unless_configured_and_reported_as_configured(app: Conveyor, noop: str) -> None:
    app.enqueue(noop)
    app.configure_queue("other", max_size=9, partitions=3)
    assert {info.name: info.settings.partitions for info in app.inspect.queues()} == {"default": 1, "other": 3}
    assert app.inspect.queue("other").settings.max_size == 9


def test_a_partitioned_queue_loses_no_task_when_its_partitions_change(app: Conveyor, noop: str) -> None:
    app.configure_queue("default", partitions=4)
    handles = [app.enqueue(noop, [n]) for n in range(12)]
    app.configure_queue("default", partitions=2)
    handles += [app.enqueue(noop, [n]) for n in range(12, 16)]
    assert app.worker().run_until_idle() == 16
    assert {app.get(handle.id).result for handle in handles} == set(range(16))
    assert app.inspect.queue("default").settings.partitions == 2
