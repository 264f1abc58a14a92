"""Duplicates: a taken ``task_id``, or the same call / ``unique_key`` within ``unique_for``."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, DuplicateTask, FakeClock, Task, TaskState, Worker


@pytest.fixture
def charge(app: Conveyor) -> Task[[str, int], str]:
    @app.task
    def charge(customer: str, cents: int) -> str:
        return f"{customer}:{cents}"

    return charge


def test_duplicate_task_id_raises_with_the_existing_id_and_changes_nothing(
    app: Conveyor, charge: Task[[str, int], str]
) -> None:
    charge.with_options(task_id="invoice-7").enqueue("ann", 100)
    before = app.get("invoice-7")
    with pytest.raises(DuplicateTask) as dup:
        charge.with_options(task_id="invoice-7", priority=9).enqueue("bob", 200)
    assert dup.value.existing_id == "invoice-7"
    assert app.get("invoice-7") == before
    assert app.stats()["default"]["total"] == 1


def test_task_id_of_a_finished_but_readable_task_is_still_taken(
    app: Conveyor, worker: Worker, charge: Task[[str, int], str]
) -> None:
    charge.with_options(task_id="invoice-7").enqueue("ann", 100)
    worker.process_next()
    with pytest.raises(DuplicateTask):
        charge.with_options(task_id="invoice-7").enqueue("ann", 100)


def test_same_call_within_unique_for_is_a_duplicate(app: Conveyor, charge: Task[[str, int], str]) -> None:
    first = charge.with_options(unique_for=600).enqueue("ann", 100)
    with pytest.raises(DuplicateTask) as dup:
        charge.with_options(unique_for=600).enqueue("ann", 100)
    assert dup.value.existing_id == first.id
    assert app.stats()["default"]["total"] == 1


def test_unique_for_given_at_registration_holds_for_every_enqueue_and_lifts_per_call(
    app: Conveyor, clock: FakeClock
) -> None:
    @app.task(unique_for=600)
    def sync_account(account: str) -> None: ...

    first = sync_account.enqueue("a-1")
    with pytest.raises(DuplicateTask) as dup:
        sync_account.enqueue("a-1")
    assert dup.value.existing_id == first.id
    with pytest.raises(DuplicateTask):
        app.enqueue("sync_account", ["a-1"], priority=5)  # other options: the window still holds
    sync_account.enqueue("a-2")  # other arguments: not a duplicate
    sync_account.with_options(unique_for=None).enqueue("a-1")  # lifted for this call
    assert sync_account.with_options(unique_for=60).enqueue("a-3").status().state is TaskState.PENDING
    batch = sync_account.enqueue_many([(["a-9"], {}), (["a-9"], {}), (["a-2"], {})])  # a batch too
    assert batch[1].id == batch[0].id and batch[2].id != batch[0].id
    assert app.stats()["default"]["total"] == 5
    clock.advance(600)
    sync_account.enqueue("a-1")  # past the window
    assert app.stats()["default"]["total"] == 6


def test_a_tasks_info_says_what_makes_it_unique(app: Conveyor, clock: FakeClock, charge: Task[[str, int], str]) -> None:
    assert charge.enqueue("ann", 1).status().unique_key is None
    by_call = charge.with_options(unique_for=600).enqueue("ann", 2).status()
    assert isinstance(by_call.unique_key, str)
    again = charge.with_options(unique_for=60).enqueue("bob", 2).status()
    assert again.unique_key not in (None, by_call.unique_key)  # the arguments' own key
    by_key = charge.with_options(unique_key="invoice-7", unique_for=30).enqueue("ann", 3).status()
    assert by_key.unique_key == "invoice-7"


def test_unique_for_at_registration_is_checked_there() -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValueError, match="unique_for"):
        app.task(unique_for=-1)
    with pytest.raises(TypeError, match="unique_for"):
        app.task(unique_for="10 minutes")


def test_same_call_with_keyword_arguments_in_another_order_is_a_duplicate(
    app: Conveyor, charge: Task[[str, int], str]
) -> None:
    app.enqueue(charge.name, kwargs={"customer": "ann", "cents": 100}, unique_for=600)
    with pytest.raises(DuplicateTask):
        app.enqueue(charge.name, kwargs={"cents": 100, "customer": "ann"}, unique_for=600)


def test_calls_with_different_arguments_are_not_duplicates(app: Conveyor, charge: Task[[str, int], str]) -> None:
    charge.with_options(unique_for=600).enqueue("ann", 100)
    charge.with_options(unique_for=600).enqueue("ann", 101)
    assert app.stats()["default"]["total"] == 2


def test_same_arguments_of_another_task_name_are_not_duplicates(app: Conveyor, charge: Task[[str, int], str]) -> None:
    charge.with_options(unique_for=600).enqueue("ann", 100)
    app.enqueue("refund", args=["ann", 100], unique_for=600)
    assert app.stats()["default"]["total"] == 2


def test_same_call_after_the_unique_for_window_is_accepted(
    app: Conveyor, clock: FakeClock, charge: Task[[str, int], str]
) -> None:
    charge.with_options(unique_for=600).enqueue("ann", 100)
    clock.advance(600)
    charge.with_options(unique_for=600).enqueue("ann", 100)
    assert app.stats()["default"]["pending"] == 2


def test_same_call_after_the_first_finished_is_accepted(
    app: Conveyor, worker: Worker, charge: Task[[str, int], str]
) -> None:
    first = charge.with_options(unique_for=600).enqueue("ann", 100)
    worker.process_next()
    second = charge.with_options(unique_for=600).enqueue("ann", 100)
    assert second.id != first.id
    assert app.get(second.id).state is TaskState.PENDING


def test_unique_key_makes_different_calls_duplicates(app: Conveyor, charge: Task[[str, int], str]) -> None:
    first = charge.with_options(unique_key="ann-monthly", unique_for=600).enqueue("ann", 100)
    with pytest.raises(DuplicateTask) as dup:
        charge.with_options(unique_key="ann-monthly", unique_for=600).enqueue("ann", 999)
    assert dup.value.existing_id == first.id


def test_unique_key_without_unique_for_holds_while_the_first_is_unfinished(
    app: Conveyor, clock: FakeClock, worker: Worker, charge: Task[[str, int], str]
) -> None:
    charge.with_options(unique_key="ann-monthly").enqueue("ann", 100)
    clock.advance(30 * 24 * 3600)
    with pytest.raises(DuplicateTask):
        charge.with_options(unique_key="ann-monthly").enqueue("ann", 100)
    worker.process_next()
    charge.with_options(unique_key="ann-monthly").enqueue("ann", 100)


def test_duplicate_in_one_enqueue_many_batch_points_at_the_first(app: Conveyor, charge: Task[[str, int], str]) -> None:
    handles = charge.with_options(unique_for=60).enqueue_many([(["ann", 1], {}), (["ann", 1], {}), (["bob", 1], {})])
    assert handles[0].id == handles[1].id != handles[2].id
    assert app.stats()["default"]["total"] == 2
