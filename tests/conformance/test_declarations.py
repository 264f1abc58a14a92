"""Task declarations (``DeclaresTasks``): what workers publish, and enqueue by name applying it."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, DuplicateTask, FakeClock, TaskDeclaration
from conveyor.brokers.base import DeclaresTasks
from conveyor.declared import declarations_of


def test_every_broker_keeps_declarations(app: Conveyor) -> None:
    assert isinstance(app.broker, DeclaresTasks)


def test_declarations_read_back_by_name_and_the_latest_wins(app: Conveyor) -> None:
    broker = app.broker
    assert isinstance(broker, DeclaresTasks)
    broker.declare_tasks([TaskDeclaration("a", "emails", 3, 60.0, 1, 5.0, 10.0, 7.0), TaskDeclaration("b")])
    broker.declare_tasks([TaskDeclaration("b", "reports", declared_at=8.0)])
    assert broker.declared_tasks(["a", "missing"]) == {"a": TaskDeclaration("a", "emails", 3, 60.0, 1, 5.0, 10.0, 7.0)}
    assert broker.declared_tasks() == {
        "a": TaskDeclaration("a", "emails", 3, 60.0, 1, 5.0, 10.0, 7.0),
        "b": TaskDeclaration("b", "reports", declared_at=8.0),
    }
    assert broker.declared_tasks([]) == {}


def test_enqueue_by_name_uses_the_declared_queue_priority_and_expiry(app: Conveyor, clock: FakeClock) -> None:
    @app.task(queue="emails", priority=4, expires=30)
    def send_email(to: str) -> None: ...

    app.declared.publish(declarations_of(app.registry, app.now()))
    producer = Conveyor(broker=app.broker, clock=clock)  # no handler registered
    info = producer.enqueue("send_email", ["a@x"]).status()
    assert (info.queue, info.priority, info.expires_at) == ("emails", 4, app.now() + 30)
    explicit = producer.enqueue("send_email", ["b@x"], queue="urgent", priority=1).status()
    assert (explicit.queue, explicit.priority) == ("urgent", 1)


def test_enqueue_by_name_applies_the_declared_unique_for(app: Conveyor, clock: FakeClock) -> None:
    @app.task(unique_for=300)
    def sync_account(account: str) -> None: ...

    app.declared.publish(declarations_of(app.registry, app.now()))
    assert app.broker.declared_tasks(["sync_account"])["sync_account"].unique_for == 300.0  # type: ignore[attr-defined]
    producer = Conveyor(broker=app.broker, clock=clock)  # no handler registered
    first = producer.enqueue("sync_account", ["a-1"])
    with pytest.raises(DuplicateTask) as dup:
        producer.enqueue("sync_account", ["a-1"])
    assert dup.value.existing_id == first.id
    producer.enqueue("sync_account", ["a-1"], unique_for=None)  # lifted for this call
    assert app.stats()["default"]["total"] == 2


def test_enqueue_of_an_undeclared_name_goes_to_the_default_queue(app: Conveyor, clock: FakeClock) -> None:
    producer = Conveyor(broker=app.broker, clock=clock)
    assert producer.declaration("nobody_serves_this") is None
    assert producer.enqueue("nobody_serves_this").status().queue == "default"


def test_declaration_rejects_a_bad_name(app: Conveyor) -> None:
    with pytest.raises(ValueError):
        app.declaration("")
