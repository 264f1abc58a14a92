"""Pure decisions: how an execution's end maps to a broker ``Outcome``.

Shared by the worker and by external consumers' ``Lease`` so both apply the same retry rules:
an exception in ``retry_on`` with retries left → retry after the backoff (or ``Retry.delay``);
retries exhausted → archived ``failed``; ``PermanentError`` or an exception outside ``retry_on`` →
archived ``permanent``.
"""

from __future__ import annotations

import random
import traceback

from conveyor._validate import LATEST
from conveyor.errors import PermanentError, Retry
from conveyor.model import ArchiveReason, Outcome, TaskRecord
from conveyor.options import EffectiveOptions

__all__ = [
    "CUT_MARKER",
    "ERROR_CUT_MARKER",
    "MAX_ERROR_CHARS",
    "MAX_TRACEBACK_CHARS",
    "MAX_TRACEBACK_FRAMES",
    "bound_error",
    "bound_traceback",
    "complete",
    "describe",
    "failure",
]

#: A stored traceback's bounds: its innermost frames (where the error was raised) and its last
#: characters are kept, so that a deep recursion or a huge message cannot bloat every failed task.
MAX_TRACEBACK_FRAMES = 64
MAX_TRACEBACK_CHARS = 8192
#: What replaces the part of a traceback cut off by the bounds.
CUT_MARKER = "[... traceback cut ...]\n"
#: A stored error's bound (``describe``): a task's every failure, its history and each log line of it
#: carry it, so a handler's multi-megabyte message is cut, keeping its start and its end.
MAX_ERROR_CHARS = 4096
ERROR_CUT_MARKER = " [... error cut ...] "


def describe(exc: BaseException) -> str:
    """``"ExcType: message"`` (just the type when there is no message; a note in its place when the
    exception's ``__str__`` itself raises, as ``traceback`` prints it), at most
    :data:`MAX_ERROR_CHARS` characters (its first three quarters and its end around
    :data:`ERROR_CUT_MARKER`)."""
    try:
        message = str(exc)
    except BaseException:  # a handler's exception must not break the failure's own handling
        message = "<exception str() failed>"
    return bound_error(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def bound_error(text: str) -> str:
    """``text`` if at most :data:`MAX_ERROR_CHARS` long, else its first three quarters and its end
    around :data:`ERROR_CUT_MARKER`."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    room = MAX_ERROR_CHARS - len(ERROR_CUT_MARKER)
    head = room * 3 // 4
    return text[:head] + ERROR_CUT_MARKER + text[len(text) - (room - head) :]


def bound_traceback(exc: BaseException) -> str | None:
    """``exc``'s formatted traceback (with its chained exceptions), bounded: at most
    :data:`MAX_TRACEBACK_FRAMES` frames per exception (the innermost) and :data:`MAX_TRACEBACK_CHARS`
    characters (its first quarter and its end), with :data:`CUT_MARKER` where something was cut. None
    for an exception never raised."""
    if exc.__traceback__ is None:
        return None
    try:
        lines = traceback.format_exception(exc, limit=-MAX_TRACEBACK_FRAMES)
    except BaseException:  # an exception's __str__ raising what traceback does not catch (KeyboardInterrupt)
        return None
    text = "".join(lines)
    cut = any(_frames(tb) > MAX_TRACEBACK_FRAMES for tb in _tracebacks(exc))
    room = MAX_TRACEBACK_CHARS - len(CUT_MARKER)
    if len(text) > room:  # its head (where it starts) and mostly its tail (where it was raised)
        head = room // 4
        return text[:head] + CUT_MARKER + text[len(text) - (room - head) :]
    return CUT_MARKER + text if cut else text


def _tracebacks(exc: BaseException) -> list[object]:
    """The tracebacks ``format_exception`` shows: ``exc``'s and its chained exceptions' (cycles cut)."""
    seen: set[int] = set()
    found: list[object] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current.__traceback__)
        pending.extend((current.__cause__, current.__context__))
    return found


def _frames(tb: object) -> int:
    count = 0
    while tb is not None:
        count += 1
        tb = getattr(tb, "tb_next", None)
    return count


def complete(record: TaskRecord, token: str, result: str, options: EffectiveOptions) -> Outcome:
    """``result``: the encoded result. ``"null"`` (what most handlers return) is not stored: a completed
    task without a result reads as ``None`` all the same, and every backend saves a write and the memory
    of the value (docs/performance-notes.md)."""
    # positional (task_id, token, kind, result, error, run_at, reason, keep_for): every task a worker
    # runs to the end makes one, and keywords cost more to match
    return Outcome(
        record.id, token, "complete", None if result == "null" else result, None, None, None, options.retention
    )


def failure(
    record: TaskRecord,
    token: str,
    exc: BaseException | str,
    options: EffectiveOptions,
    now: float,
    rng: random.Random,
    *,
    retryable: bool | None = None,
) -> Outcome:
    """The outcome of a failed execution (``exc`` may be a message for external consumers)."""
    error, trace = (bound_error(exc), None) if isinstance(exc, str) else (describe(exc), bound_traceback(exc))
    delay: float | None = None
    if isinstance(exc, PermanentError):
        retryable = False
    elif isinstance(exc, Retry):
        retryable, delay = True, exc.delay
    elif retryable is None:
        retryable = isinstance(exc, BaseException) and options.retryable(exc)
    limit = options.max_retries  # recorded on the task: readers without the handler cannot resolve it
    if not retryable:
        return Outcome(
            record.id,
            token,
            "archive",
            error=error,
            reason=ArchiveReason.PERMANENT,
            max_retries=limit,
            traceback=trace,
        )
    if record.retries >= limit:
        return Outcome(
            record.id,
            token,
            "archive",
            error=error,
            reason=ArchiveReason.FAILED,
            max_retries=limit,
            traceback=trace,
        )
    if delay is None:
        delay = options.backoff.delay(record.retries + 1, rng)
    run_at = min(now + delay, LATEST)  # a retry asked for past the year 9999 waits until then
    return Outcome(record.id, token, "retry", error=error, run_at=run_at, max_retries=limit, traceback=trace)
