"""Backoff policies as pure functions of (failure count, rng)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from conveyor import Backoff, ConfigurationError, Exponential, Fixed, UnknownBackoff, register_backoff
from conveyor.retry import backoff_from_dict


@pytest.fixture
def rng() -> random.Random:
    return random.Random(7)


def test_exponential_defaults_wait_one_second_doubling_capped_at_an_hour(rng: random.Random) -> None:
    policy = Exponential()
    assert [policy.delay(n, rng) for n in (1, 2, 3, 4, 12, 13, 50)] == [1, 2, 4, 8, 2048, 3600, 3600]


def test_exponential_waits_initial_times_factor_to_the_failures_minus_one(rng: random.Random) -> None:
    policy = Exponential(initial=0.5, factor=3.0, max=None)
    assert [policy.delay(n, rng) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 13.5]


def test_exponential_is_capped_at_max(rng: random.Random) -> None:
    policy = Exponential(initial=10.0, factor=10.0, max=250.0)
    assert [policy.delay(n, rng) for n in (1, 2, 3)] == [10.0, 100.0, 250.0]


def test_exponential_without_a_cap_never_overflows(rng: random.Random) -> None:
    wait = Exponential(initial=1.0, factor=10.0, max=None).delay(10_000, rng)
    assert 0 < wait < float("inf")


def test_factor_one_is_a_constant_wait(rng: random.Random) -> None:
    assert {Exponential(initial=3.0, factor=1.0).delay(n, rng) for n in range(1, 10)} == {3.0}


def test_jitter_draws_full_jitter_from_the_given_rng() -> None:
    policy = Exponential(initial=8.0, factor=2.0, max=None, jitter=True)
    first = [policy.delay(n, random.Random(1)) for n in (1, 2, 3)]
    again = [policy.delay(n, random.Random(1)) for n in (1, 2, 3)]
    assert first == again
    assert all(0.0 <= wait <= 8.0 * 2 ** (n - 1) for n, wait in zip((1, 2, 3), first, strict=True))


def test_jitter_spreads_the_waits(rng: random.Random) -> None:
    policy = Exponential(initial=100.0, jitter=True)
    assert len({policy.delay(1, rng) for _ in range(20)}) == 20


def test_jitter_respects_the_cap(rng: random.Random) -> None:
    policy = Exponential(initial=100.0, factor=10.0, max=150.0, jitter=True)
    assert all(policy.delay(5, rng) <= 150.0 for _ in range(50))


def test_fixed_waits_the_same_after_every_failure(rng: random.Random) -> None:
    assert [Fixed(4.0).delay(n, rng) for n in (1, 2, 30)] == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("policy", [Exponential(), Exponential(0.5, 3.0, None, True), Fixed(2.5)])
def test_policies_round_trip_through_their_dict_form(policy: Backoff) -> None:
    assert backoff_from_dict(policy.to_dict()) == policy


def test_unknown_backoff_kind_is_rejected() -> None:
    with pytest.raises(ValueError):
        backoff_from_dict({"kind": "fibonacci"})


def test_policies_are_backoffs() -> None:
    assert isinstance(Exponential(), Backoff) and isinstance(Fixed(), Backoff)


@register_backoff("test-registry-halving")
@dataclass(frozen=True)
class Halving:
    start: float = 64.0

    def delay(self, failures: int, rng: random.Random) -> float:
        return self.start * 0.5**failures

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "test-registry-halving", "start": self.start}


def test_registered_policy_round_trips_through_its_dict_form() -> None:
    assert backoff_from_dict(Halving(8.0).to_dict()) == Halving(8.0)


def test_registering_the_same_class_again_is_a_no_op() -> None:
    assert register_backoff("test-registry-halving")(Halving) is Halving


@pytest.mark.parametrize("kind", ["exponential", "fixed", "test-registry-halving"])
def test_a_taken_kind_cannot_name_another_class(kind: str) -> None:
    with pytest.raises(ConfigurationError, match="already registered"):

        @register_backoff(kind)
        class Other(Halving): ...


@pytest.mark.parametrize(
    ("kind", "error"), [("", ValueError), ("has space", ValueError), ("x" * 65, ValueError), (7, TypeError)]
)
def test_a_kind_must_be_a_short_printable_str(kind: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        register_backoff(kind)


def test_only_a_class_with_delay_can_be_registered() -> None:
    with pytest.raises(TypeError):
        register_backoff("test-registry-no-delay")(int)


def test_a_stored_policy_its_class_refuses_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        backoff_from_dict({"kind": "test-registry-halving", "colour": "blue"})


def test_a_stored_policy_without_a_kind_is_damaged_not_unknown() -> None:
    with pytest.raises(ValueError) as raised:
        backoff_from_dict({"step": 2})
    assert not isinstance(raised.value, UnknownBackoff)


def test_an_unknown_kind_is_an_unknown_backoff_naming_the_fix() -> None:
    with pytest.raises(UnknownBackoff, match=r"@register_backoff\('fibonacci'\)"):
        backoff_from_dict({"kind": "fibonacci"})
