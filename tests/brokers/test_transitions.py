"""The shared transition rules (``conveyor.brokers.transitions``): Redis's Lua spells the same texts,
and every broker refuses an operator action in the same words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, InvalidTransition
from conveyor.brokers import transitions
from conveyor.brokers.redis.scripts import LIBRARY, OPERATIONS, read_source
from conveyor.model import NewTask, Outcome

#: The texts the Lua scripts share with the Python rules, by their name in both.
SHARED_TEXTS = {
    "EXPIRED_ERROR": transitions.EXPIRED_ERROR,
    "RETRY_ERROR": transitions.RETRY_ERROR,
    "LEASE_EXPIRED_ERROR": transitions.LEASE_EXPIRED_ERROR,
}


def _lua_sources() -> dict[str, str]:
    return {name: read_source(name) for name in (*LIBRARY, *OPERATIONS)}


@pytest.mark.parametrize("name", sorted(SHARED_TEXTS))
def test_lua_library_defines_each_shared_text_as_the_python_rules_do(name: str) -> None:
    found = re.findall(rf"^local {name} = '(.*)'$", read_source("_states"), flags=re.MULTILINE)
    assert found == [SHARED_TEXTS[name]]


@pytest.mark.parametrize("name", sorted(SHARED_TEXTS))
def test_no_lua_script_spells_a_shared_text_again(name: str) -> None:
    head = SHARED_TEXTS[name].partition("{")[0]
    places = [op for op, text in _lua_sources().items() for _ in range(text.count(f"'{head}"))]
    assert places == ["_states"]


def test_lua_sources_are_the_ones_in_the_package() -> None:
    lua = Path(transitions.__file__).parent / "redis" / "lua"
    assert sorted(p.stem for p in lua.glob("*.lua")) == sorted(_lua_sources())


def _refused(action: str, state: str, task_id: str) -> str:
    return re.escape(str(transitions.refusal(action, state, task_id)))


def test_every_broker_refuses_an_operator_action_in_the_same_words(app: Conveyor, clock: FakeClock) -> None:
    broker = app.broker
    now = clock.now()
    broker.enqueue([NewTask("waiting", "noop", "q", "[[],{}]"), NewTask("running", "noop", "q", "[[],{}]")], now)
    with pytest.raises(InvalidTransition, match=f"^{_refused('run_now', 'pending', 'waiting')}$"):
        broker.run_now("waiting", now)
    (claimed,) = broker.claim(["q"], now, 30.0, limit=1)
    assert claimed.id == "waiting"
    with pytest.raises(InvalidTransition, match=f"^{_refused('delete', 'active', 'waiting')}$"):
        broker.delete("waiting", now)
    with pytest.raises(InvalidTransition, match=f"^{_refused('archive', 'active', 'waiting')}$"):
        broker.archive("waiting", now)
    assert broker.settle([Outcome("waiting", claimed.lease_token or "", "complete", result="null")], now) == [True]
    with pytest.raises(InvalidTransition, match=f"^{_refused('cancel', 'completed', 'waiting')}$"):
        broker.cancel("waiting", now)
