"""``conveyor.outcomes``: the outcome a finished execution maps to."""

from __future__ import annotations

from conveyor import outcomes
from conveyor.model import Outcome, TaskRecord, TaskState
from conveyor.options import TaskOptions, resolve


def test_complete_keeps_the_result_for_the_tasks_retention() -> None:
    # complete() builds its Outcome positionally (the worker's hot path): it must mean the fields named
    record = TaskRecord("t1", "job", "q", TaskState.ACTIVE, "[[], {}]", "{}", 0, 1.0, 1.0, None, attempts=1)
    options = resolve({"retention": 120.0}, TaskOptions())
    assert outcomes.complete(record, "tok-1", '{"ok": 1}', options) == Outcome(
        task_id="t1", token="tok-1", kind="complete", result='{"ok": 1}', keep_for=120.0
    )
