"""``poll_until``: returns the first truthy value, fails naming what it awaited, checks its arguments."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from conveyor.errors import ConfigurationError
from conveyor.testing import poll_until


def test_returns_the_first_truthy_value_of_the_predicate() -> None:
    answers: Iterator[object] = iter([None, 0, [], "found"])
    assert poll_until(lambda: next(answers), interval=0.001) == "found"


def test_sees_what_another_thread_does() -> None:
    done = threading.Event()
    threading.Timer(0.05, done.set).start()
    assert poll_until(done.is_set, timeout=10.0) is True


def test_fails_after_the_timeout_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"^timed out after 0\.05 s waiting for the queue to drain$"):
        poll_until(lambda: False, timeout=0.05, message="the queue to drain")
    assert time.monotonic() - started >= 0.05


def test_a_message_function_describes_the_state_at_the_timeout() -> None:
    seen = [1, 2]
    with pytest.raises(AssertionError, match=r"waiting for three items \(saw \[1, 2\]\)"):
        poll_until(lambda: len(seen) == 3, timeout=0.01, message=lambda: f"three items (saw {seen})")


def test_asks_once_more_at_the_deadline_after_a_long_interval() -> None:
    calls: list[float] = []

    def third_time_lucky() -> bool:
        calls.append(time.monotonic())
        return len(calls) == 2

    assert poll_until(third_time_lucky, timeout=0.05, interval=60.0) is True
    assert calls[1] - calls[0] < 10.0  # the sleep ended at the deadline, not after the interval


def test_a_zero_timeout_asks_once() -> None:
    calls: list[int] = []
    with pytest.raises(AssertionError):
        poll_until(lambda: calls.append(1), timeout=0)
    assert calls == [1]


def test_an_exception_from_the_predicate_propagates_at_once() -> None:
    def broken() -> bool:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        poll_until(broken, timeout=30.0)


@pytest.mark.parametrize(
    ("timeout", "interval"), [(-1.0, 0.01), (float("nan"), 0.01), (float("inf"), 0.01), (1.0, 0.0), (True, 0.1)]
)
def test_bad_timeouts_and_intervals_are_refused(timeout: float, interval: float) -> None:
    with pytest.raises(ConfigurationError):
        poll_until(lambda: True, timeout=timeout, interval=interval)
