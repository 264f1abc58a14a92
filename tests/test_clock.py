"""Clocks: FakeClock moves only when told to; any zero-argument callable is a clock."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, SystemClock
from conveyor.clock import PRESENT_SLACK, is_present


def test_fake_clock_starts_where_told_and_is_callable() -> None:
    clock = FakeClock(12.5)
    assert clock.now() == clock() == 12.5


def test_fake_clock_does_not_move_by_itself() -> None:
    clock = FakeClock(0.0)
    assert clock.now() == clock.now() == 0.0


def test_fake_clock_advance_returns_the_new_time() -> None:
    clock = FakeClock(10.0)
    assert clock.advance(2.5) == 12.5
    assert clock.now() == 12.5


def test_fake_clock_set_may_move_backwards_to_model_skew() -> None:
    clock = FakeClock(100.0)
    clock.set(50.0)
    assert clock() == 50.0


@pytest.mark.parametrize(
    ("seconds", "error"),
    [(-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError), (True, TypeError)],
)
def test_fake_clock_rejects_bad_advances(seconds: Any, error: type[Exception]) -> None:
    clock = FakeClock(0.0)
    with pytest.raises(error):
        clock.advance(seconds)
    assert clock.now() == 0.0


@pytest.mark.parametrize(("start", "error"), [(math.nan, ValueError), ("0", TypeError)])
def test_fake_clock_rejects_a_bad_start(start: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        FakeClock(start)


def test_system_clock_reads_the_wall_clock() -> None:
    before = time.time()
    now = SystemClock()()
    assert before <= now <= time.time()
    assert SystemClock().now() >= now


def test_any_zero_argument_callable_is_a_clock() -> None:
    app = Conveyor("memory://", clock=lambda: 42.0)
    assert app.get(app.enqueue("job").id).enqueued_at == 42.0


def test_app_without_a_clock_uses_the_wall_clock() -> None:
    before = time.time()
    app = Conveyor("memory://")
    assert before <= app.now() <= time.time()


def test_is_present_tells_the_present_from_a_fake_clocks_time() -> None:
    assert is_present(time.time())
    assert not is_present(FakeClock(1000.0)())  # 1970: not now
    assert is_present(5.0, FakeClock(5.0 + PRESENT_SLACK))
    assert not is_present(5.0, FakeClock(5.0 + 2 * PRESENT_SLACK))
