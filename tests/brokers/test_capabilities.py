"""Which optional capabilities (``conveyor.brokers.capabilities``) each broker declares, and what the app
does with a broker that has none of them."""

from __future__ import annotations

from pathlib import Path

from conveyor import Conveyor, FakeClock, SystemClock
from conveyor.brokers import capabilities
from conveyor.brokers.base import AppliesPolicy, SharesClock
from conveyor.brokers.memory import MemoryBroker
from conveyor.model import BrokerPolicy

EVERY = {name: getattr(capabilities, name) for name in capabilities.__all__ if name != "Finding"}

DECLARED = {
    "memory": {
        "AnnouncesCancels",
        "AppliesPolicy",
        "CommandsWorkers",
        "DeclaresTasks",
        "ForgetsQueues",
        "InterruptsWaits",
        "KeepsHistory",
        "WaitsForWork",
    },
    "sqlite": {
        "AppliesPolicy",
        "ChecksServer",
        "CommandsWorkers",
        "DeclaresTasks",
        "ForgetsQueues",
        "InterruptsWaits",
        "KeepsHistory",
        "SettlesWithClaim",
        "WaitsForWork",
    },
    "redis": set(EVERY) - {"SettlesWithClaim"},
}


def test_each_broker_declares_its_capabilities(app: Conveyor, broker_url: str) -> None:
    found = {name for name, capability in EVERY.items() if isinstance(app.broker, capability)}
    assert found == DECLARED[broker_url.split(":", 1)[0]]


class _Bare:
    """A broker with no policy attribute, as a third-party broker may be: it hands every other name to a
    memory broker. (Python 3.12+ checks a protocol's attributes statically, so hiding ``policy`` in
    ``__getattribute__`` of a MemoryBroker subclass would still count as having it.)"""

    def __init__(self, policy: BrokerPolicy) -> None:
        self._inner = MemoryBroker(policy)

    def __getattr__(self, name: str) -> object:
        if name == "policy":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_rebind_keeps_the_policy_of_a_broker_that_applies_one_and_does_without_otherwise(tmp_path: Path) -> None:
    policy = BrokerPolicy(max_stalls=7)
    app = Conveyor(broker=MemoryBroker(policy), clock=FakeClock())
    app.rebind(f"sqlite:///{tmp_path / 'a.db'}")
    assert isinstance(app.broker, AppliesPolicy) and app.broker.policy == policy
    bare = Conveyor(broker=_Bare(policy), clock=FakeClock())  # type: ignore[arg-type]
    assert not isinstance(bare.broker, AppliesPolicy)
    bare.rebind(f"sqlite:///{tmp_path / 'b.db'}")
    assert isinstance(bare.broker, AppliesPolicy) and bare.broker.policy == BrokerPolicy()
    app.close()
    bare.close()


def test_an_app_without_an_injected_clock_runs_on_the_brokers_shared_clock(redis_url: str) -> None:
    app = Conveyor(redis_url)
    try:
        assert isinstance(app.broker, SharesClock)
        assert app.clock is app.broker.server_clock()
    finally:
        app.close()


def test_an_app_on_a_broker_without_a_shared_clock_reads_the_system_clock() -> None:
    with Conveyor("memory://") as app:
        assert not isinstance(app.broker, SharesClock)
        assert isinstance(app.clock, SystemClock)
