"""``conveyor.outcomes``: the outcome a finished execution maps to."""

from __future__ import annotations

import random

from conveyor import outcomes
from conveyor.model import Outcome, TaskRecord, TaskState
from conveyor.options import TaskOptions, resolve
from conveyor.outcomes import (
    CUT_MARKER,
    ERROR_CUT_MARKER,
    MAX_ERROR_CHARS,
    MAX_TRACEBACK_CHARS,
    bound_traceback,
    describe,
    failure,
)


def test_complete_keeps_the_result_for_the_tasks_retention() -> None:
    # complete() builds its Outcome positionally (the worker's hot path): it must mean the fields named
    record = TaskRecord("t1", "job", "q", TaskState.ACTIVE, "[[], {}]", "{}", 0, 1.0, 1.0, None, attempts=1)
    options = resolve({"retention": 120.0}, TaskOptions())
    assert outcomes.complete(record, "tok-1", '{"ok": 1}', options) == Outcome(
        task_id="t1", token="tok-1", kind="complete", result='{"ok": 1}', keep_for=120.0
    )


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_traceback_is_formatted_whole_when_small_and_none_for_an_exception_never_raised() -> None:
    text = bound_traceback(_raised(ValueError("small")))
    assert text is not None and text.startswith("Traceback (most recent call last):")
    assert "in _raised" in text and text.endswith("ValueError: small\n") and CUT_MARKER not in text
    assert bound_traceback(ValueError("never raised")) is None


def test_a_huge_traceback_keeps_its_head_and_its_end_with_a_marker_between() -> None:
    text = bound_traceback(_raised(ValueError("y" * 50_000)))
    assert text is not None and len(text) == MAX_TRACEBACK_CHARS
    head, _, tail = text.partition(CUT_MARKER)
    assert head.startswith("Traceback (most recent call last):") and tail.endswith("y" * 1000 + "\n")


def test_chained_exceptions_are_shown_and_a_cycle_does_not_hang() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as outer:
        assert outer.__cause__ is not None
        outer.__cause__.__context__ = outer  # a cycle
        text = bound_traceback(outer)
    assert text is not None and "KeyError: 'inner'" in text and "RuntimeError: outer" in text


def test_a_huge_error_keeps_its_start_and_its_end_within_the_bound() -> None:
    """Every failure, the error history and each log line of it carry the error: a 5 MB message is
    cut, as a string given to ``Lease.fail`` is."""
    text = describe(ValueError("s" + "m" * 5_000_000 + "e"))
    assert len(text) == MAX_ERROR_CHARS and ERROR_CUT_MARKER in text
    assert text.startswith("ValueError: smmm") and text.endswith("mmme")
    record = TaskRecord("t1", "job", "q", TaskState.ACTIVE, "[[], {}]", "{}", 0, 1.0, 1.0, None, attempts=1)
    outcome = failure(record, "tok", "x" * 100_000, resolve({}, TaskOptions()), 2.0, random.Random(1))
    assert outcome.error is not None and len(outcome.error) == MAX_ERROR_CHARS
    assert describe(ValueError("small")) == "ValueError: small"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise KeyboardInterrupt


def test_an_exception_whose_str_raises_a_base_exception_is_described_with_a_note() -> None:
    """Not only an ``Exception`` out of ``__str__``: the failure must still be recorded as one."""
    assert describe(_Unprintable()) == "_Unprintable: <exception str() failed>"
    bound_traceback(_raised(_Unprintable()))  # does not raise: a traceback, or None if none can be formatted
