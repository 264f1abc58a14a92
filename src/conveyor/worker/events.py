"""The one-line log of each state change of a task (``log_event``), shared by the services that see one.

Log lines are ``key=value`` text on ``conveyor.worker``, and carry the same fields as
``extra={"conveyor": {...}}`` for structured handlers. A task's start and its success are DEBUG (two
INFO lines per task cost a no-op drain more than half its worker CPU); every other change of state
(retry, archive, lease lost, cancelled) is INFO, one line each. What a worker did at INFO is its
periodic summary (``summary.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from conveyor.model import Outcome, TaskRecord

__all__ = ["ROUTINE", "event_level", "log_event", "outcome_event"]

log = logging.getLogger("conveyor.worker")

_EVENT = {"complete": "completed", "retry": "retry", "archive": "archived", "release": "released"}

#: Events logged at DEBUG: those of every task, and releases (a shutdown logs one INFO line for all
#: it releases; an unknown task name, a WARNING). The others are logged at INFO.
ROUTINE = frozenset({"started", "completed", "released"})


def event_level(event: str) -> int:
    return logging.DEBUG if event in ROUTINE else logging.INFO


def log_event(record: TaskRecord, event: str, duration: float | None = None, **more: Any) -> None:
    """One structured line: ``task <event> id=... name=... queue=... attempt=... duration=...``, at
    DEBUG for a ``ROUTINE`` event (a start, a success), else at INFO."""
    level = event_level(event)
    if not log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "event": event,
        "task_id": record.id,
        "name": record.name,
        "queue": record.queue,
        "attempt": record.attempts,
    }
    if duration is not None:
        fields["duration"] = round(duration, 6)
    fields.update({k: v for k, v in more.items() if v is not None})
    text = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
    log.log(level, "task %s %s", event, text, extra={"conveyor": fields})


def outcome_event(outcome: Outcome) -> str:
    return _EVENT.get(outcome.kind, outcome.kind)
