"""``SpyBroker``: passes every call on, records it, injects faults, and keeps the wrapped broker's
capabilities (so the worker takes the same paths)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.brokers import capabilities
from conveyor.brokers.base import Broker
from conveyor.errors import BrokerUnavailable, ConfigurationError
from conveyor.model import BrokerPolicy, NewTask
from conveyor.testing import Call, SpyBroker, poll_until

#: Every optional capability Protocol a broker may have.
CAPABILITIES = [
    value
    for value in vars(capabilities).values()
    if isinstance(value, type) and getattr(value, "_is_runtime_protocol", False)
]


@pytest.fixture
def spy(broker_url: str) -> Iterator[SpyBroker[Broker]]:
    opened = SpyBroker.from_url(broker_url)
    yield opened
    opened.close()


@pytest.fixture
def memory_spy() -> SpyBroker[Broker]:
    return SpyBroker.from_url("memory://")


def new(task_id: str) -> NewTask:
    return NewTask(task_id, "job", "q", "[]")


def test_every_method_of_the_broker_protocol_is_declared() -> None:
    protocol = {name for name in vars(Broker) if not name.startswith("_")}
    assert protocol <= set(vars(SpyBroker))


def test_it_is_a_broker_with_exactly_the_capabilities_of_the_wrapped_one(spy: SpyBroker[Broker]) -> None:
    assert len(CAPABILITIES) >= 10
    assert isinstance(spy, Broker) and isinstance(spy, SpyBroker)
    for capability in CAPABILITIES:
        assert isinstance(spy, capability) == isinstance(spy.wrapped, capability), capability.__name__


def test_calls_go_through_and_are_recorded_with_their_arguments_by_name(spy: SpyBroker[Broker]) -> None:
    assert spy.enqueue([new("a"), new("b")], 100.0) == [None, None]
    claimed = spy.claim(["q"], 100.0, lease_for=30.0)
    assert [r.id for r in claimed] == ["a"]
    assert spy.wrapped.get("a", 100.0) is not None
    (call,) = spy.calls_to("claim")
    assert call.arguments == {"queues": ["q"], "now": 100.0, "lease_for": 30.0, "limit": 1}  # defaults too
    assert call.thread == threading.current_thread().name
    assert [c.name for c in spy.calls] == ["enqueue", "claim"] and spy.count("enqueue") == 1


def test_a_capability_call_is_recorded_too(memory_spy: SpyBroker[Broker]) -> None:
    watcher = memory_spy.watch_cancels(lambda task_id: None)
    watcher()
    assert [c.name for c in memory_spy.calls] == ["watch_cancels"]


def test_other_attributes_are_read_and_written_through_to_the_wrapped_broker(memory_spy: SpyBroker[Broker]) -> None:
    wrapped = memory_spy.wrapped
    assert isinstance(wrapped, capabilities.AppliesPolicy)
    assert memory_spy.policy is wrapped.policy
    memory_spy.policy = BrokerPolicy(max_stalls=9)  # type: ignore[attr-defined]  # (mypy: no __setattr__)
    assert wrapped.policy.max_stalls == 9
    with pytest.raises(AttributeError):
        _ = memory_spy.no_such_attribute


def test_fail_raises_on_the_next_calls_only_and_the_broker_is_untouched(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.fail("enqueue", BrokerUnavailable("down"), times=2)
    for _ in range(2):
        with pytest.raises(BrokerUnavailable, match="down"):
            memory_spy.enqueue([new("a")], 100.0)
    assert memory_spy.wrapped.get("a", 100.0) is None
    assert memory_spy.enqueue([new("a")], 100.0) == [None]
    assert memory_spy.count("enqueue") == 3  # failed calls are recorded as well


def test_fail_with_a_class_makes_a_new_exception_per_call(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.fail("queues", BrokerUnavailable, times=None)
    errors = []
    for _ in range(3):
        with pytest.raises(BrokerUnavailable) as raised:
            memory_spy.queues(100.0)
        errors.append(raised.value)
    assert len({id(e) for e in errors}) == 3


def test_before_runs_a_hook_in_the_calling_thread_and_can_hold_the_call(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.enqueue([new("a")], 100.0)
    held, go = threading.Event(), threading.Event()
    seen: list[Call] = []

    def hold(call: Call) -> None:
        seen.append(call)
        held.set()
        go.wait(10.0)

    memory_spy.before("claim", hold, times=1)
    got: list[int] = []
    claimer = threading.Thread(target=lambda: got.append(len(memory_spy.claim(["q"], 100.0, 30.0))), name="claimer")
    claimer.start()
    assert held.wait(10.0)
    assert got == [] and memory_spy.wrapped.get("a", 100.0).state.value == "pending"  # type: ignore[union-attr]
    go.set()
    claimer.join(10.0)
    assert got == [1] and [c.thread for c in seen] == ["claimer"]
    assert memory_spy.claim(["q"], 100.0, 30.0) == []  # times=1: the hook ran once
    assert len(seen) == 1


def test_delay_holds_each_call_back(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.delay("workers", 0.05, times=1)
    started = time.monotonic()
    assert memory_spy.workers(100.0) == []
    assert time.monotonic() - started >= 0.05


def test_clear_drops_the_faults_still_set(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.fail("queues", BrokerUnavailable("down"), times=None)
    memory_spy.clear()
    assert memory_spy.queues(100.0) == []


def test_an_app_and_its_worker_run_on_a_spy() -> None:
    spy = SpyBroker.from_url("memory://")
    app = Conveyor(broker=spy, clock=FakeClock(0.0))

    @app.task
    def double(x: int) -> int:
        return 2 * x

    handle = double.enqueue(21)
    assert app.worker().run_until_idle() == 1
    assert handle.result(timeout=0) == 42
    assert [c.name for c in spy.calls_to("settle")] == ["settle"]
    app.close()


def test_a_worker_thread_meets_an_injected_outage_and_goes_on(memory_spy: SpyBroker[Broker]) -> None:
    app = Conveyor(broker=memory_spy)
    done = threading.Event()

    @app.task
    def job() -> None:
        done.set()

    memory_spy.fail("claim", BrokerUnavailable("down"), times=3)
    job.enqueue()
    worker = app.worker(poll_interval=0.01, freeze_heap=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        poll_until(done.is_set, timeout=10.0, message="the task to run after the outage")
    finally:
        worker.stop()
        thread.join(10.0)
        app.close()
    assert memory_spy.count("claim") >= 4


def test_bad_arguments_are_refused_at_once(memory_spy: SpyBroker[Broker]) -> None:
    with pytest.raises(ConfigurationError, match="no public method 'clam'"):
        memory_spy.fail("clam", BrokerUnavailable("down"))
    with pytest.raises(ConfigurationError):
        memory_spy.before("_claim", lambda call: None)
    with pytest.raises(ConfigurationError):
        memory_spy.delay("claim", -1.0)
    with pytest.raises(ConfigurationError):
        memory_spy.fail("claim", BrokerUnavailable("down"), times=0)
    with pytest.raises(TypeError):
        memory_spy.fail("claim", "down")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SpyBroker(object())  # type: ignore[type-var]


def test_a_bad_call_raises_the_wrapped_methods_type_error(memory_spy: SpyBroker[Broker]) -> None:
    with pytest.raises(TypeError):
        memory_spy.claim()  # type: ignore[call-arg]
    assert memory_spy.calls == []


def test_paused_holds_other_threads_calls_and_lets_this_threads_through(memory_spy: SpyBroker[Broker]) -> None:
    memory_spy.enqueue([new("a")], 100.0)
    got: list[int] = []
    other = threading.Thread(target=lambda: got.append(len(memory_spy.claim(["q"], 100.0, 30.0))))
    with memory_spy.paused("claim"):
        other.start()
        other.join(0.05)
        assert other.is_alive() and got == []  # waiting to start
        assert memory_spy.workers(100.0) == []  # another method goes through
        assert [r.id for r in memory_spy.claim(["q"], 100.0, 30.0)] == ["a"]  # this thread's call too
    other.join(10.0)
    assert got == [0]  # it ran after the pause, and found the task taken
    assert [call.thread for call in memory_spy.calls_to("claim")][-1] == other.name


def test_a_pause_is_not_nested(memory_spy: SpyBroker[Broker]) -> None:
    with memory_spy.paused(), pytest.raises(RuntimeError), memory_spy.paused("claim"):
        pass
