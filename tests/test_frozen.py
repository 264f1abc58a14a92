"""``fast_init``: the records built through it behave exactly as plain frozen dataclasses."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import typing
from typing import Any

import pytest

from conveyor._frozen import fast_init
from conveyor.brokers.sqlite.rows import Stored
from conveyor.model import ErrorEntry, Event, NewTask, Outcome, TaskRecord, TaskState

RECORD: dict[str, Any] = {
    "id": "t1",
    "name": "send",
    "queue": "mail",
    "state": TaskState.ACTIVE,
    "payload": "[[], {}]",
    "options": "{}",
    "priority": 3,
    "enqueued_at": 10.0,
    "first_due_at": 10.0,
    "next_run_at": None,
    "attempts": 2,
    "errors": (ErrorEntry(1, 11.0, "boom"),),
    "lease_token": "abc-1",
}


def plain_twin(cls: type[Any]) -> type[Any]:
    """The same class as a plain frozen dataclass, made without fast_init."""
    specs = [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True, slots=True)


@pytest.mark.parametrize("cls", [ErrorEntry, NewTask, TaskRecord, Outcome, Event, Stored])
def test_the_signature_is_the_plain_dataclass_one(cls: type[Any]) -> None:
    ours = inspect.signature(cls)
    plain = inspect.signature(plain_twin(cls))
    assert [(p.name, p.default, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.default, p.kind) for p in plain.parameters.values()
    ]


def test_a_record_holds_its_fields_and_defaults_and_stays_frozen() -> None:
    record = TaskRecord(**RECORD)
    assert type(record) is TaskRecord
    assert {name: getattr(record, name) for name in RECORD} == RECORD
    assert (record.retries, record.result, record.cancel_requested, record.errors[0].error) == (0, None, False, "boom")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.id = "t2"  # type: ignore[misc]


def test_equality_hash_repr_replace_and_pickle_are_the_frozen_class_own() -> None:
    record = TaskRecord(**RECORD)
    twin = TaskRecord(**RECORD)
    assert record == twin and hash(record) == hash(twin) and record is not twin
    assert repr(record).startswith("TaskRecord(id='t1', name='send'")
    changed = dataclasses.replace(record, attempts=3)
    assert type(changed) is TaskRecord and changed.attempts == 3 and changed != record
    assert pickle.loads(pickle.dumps(record)) == record
    positional = Outcome("t1", "abc-1", "complete", "null")
    assert positional == Outcome(task_id="t1", token="abc-1", kind="complete", result="null")


def test_bad_arguments_are_refused_as_by_a_plain_dataclass() -> None:
    with pytest.raises(TypeError, match="missing"):
        TaskRecord(id="t1")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        Outcome("t1", "abc", "complete", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        ErrorEntry(1, 2.0, "x", attempt=1)  # type: ignore[misc]


def test_a_subclass_that_inherits_the_init_keeps_its_class() -> None:
    class Tagged(ErrorEntry):
        __slots__ = ()

    entry = Tagged(1, 2.0, "x")
    assert type(entry) is Tagged and (entry.attempt, entry.at, entry.error) == (1, 2.0, "x")


def test_what_it_cannot_build_is_refused_at_decoration() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        x: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        x: int

        def __post_init__(self) -> None:
            pass

    for cls in (Mutable, NoSlots, Factory, PostInit):
        with pytest.raises(TypeError, match="fast_init"):
            fast_init(cls)


def test_the_init_lives_in_the_class_module_so_its_type_hints_resolve() -> None:
    assert TaskRecord.__init__.__module__ == "conveyor.model"
    hints = typing.get_type_hints(TaskRecord.__init__)
    assert hints["state"] is TaskState and hints["return"] is type(None)
