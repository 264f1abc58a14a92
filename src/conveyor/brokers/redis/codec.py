"""Between Redis replies and the model's dataclasses: task rows, outcomes, events, worker info.

A task lives in three namespace-wide hashes keyed by its id: a claim or a settle reads and writes a whole
batch of tasks with one command per hash (a script pays a fixed cost per command, so commands per task
are what a batch must avoid; docs/performance-notes.md):

``rows``: 23 fields separated by single spaces, written only by the scripts, then its body: ``s`` state,
``m`` member (``%016d(seq) + id``), ``q`` queue, ``x`` expires_at, ``a`` attempts, ``c`` cancel
requested ("1"/"0"), ``l`` ("1": ``lasterr`` holds an entry), ``ne`` ("1": the failures list exists),
``tk`` lease token, ``lx`` lease deadline, ``sa`` started_at, ``fa`` finished_at, ``ku`` keep_until,
``r`` retries, ``st`` stalls, ``pr`` priority, ``ea`` enqueued_at, ``fd`` first_due_at, ``ra``
ready_at, ``nr`` next_run_at, ``ar`` archive reason, ``uu`` unique_until, ``uk`` unique key ("=" + the
key as :func:`escape_key` made it: no whitespace), then ``b``: the body, the rest of the row (it may hold
anything, hence last). "-" stands for an absent value; numbers are as Lua formats them.
``tk``, ``lx`` and ``c`` mean something only while the task is active, ``nr`` only while it is
scheduled or retry and ``fa`` only once it is completed or archived: transitions out of those states
leave them as they were (fewer writes on the hot path) and every reader ignores them in other states.
A pending task enqueued with others in one call holds its group's ``waiting`` member in ``fa``
("g" + ready_at; see ``lua/_rows.lua``), and a claim leaves it there.

The body is what never changes, built here at enqueue (:func:`encode_body`) and never parsed by the
scripts: name, options and payload. ``results``: the result of a task completed with one. ``lasterr``:
the last error, while the task has one. Failures live in a list per task, ``attempt\\tat\\terror`` each;
``limits`` and ``tracebacks`` hold the latest failed execution's retry limit and traceback.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from conveyor.history import QueueMinute
from conveyor.model import (
    UNFINISHED,
    ArchiveReason,
    ErrorEntry,
    Event,
    NewTask,
    Outcome,
    TaskRecord,
    TaskState,
    WorkerInfo,
)

__all__ = [
    "MEMBER_PREFIX",
    "ROW_FIELDS",
    "ROW_NAMES",
    "decode_body",
    "decode_claimed",
    "decode_events",
    "decode_history",
    "decode_record",
    "decode_worker",
    "encode_body",
    "encode_one_task",
    "encode_outcome",
    "encode_task",
    "encode_worker",
    "escape_key",
    "opt",
    "split_due",
    "unescape_key",
]

log = logging.getLogger("conveyor.brokers.redis")

MEMBER_PREFIX = 16  # width of the zero-padded enqueue sequence in front of the id


def opt(value: str | None) -> str:
    """An optional string as scripts expect it: "" for None, else "=" + value."""
    return "" if value is None else "=" + value


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def encode_body(name: str, options: str, payload: str) -> str:
    """A task's immutable part as one value: ``name\\n<len(options)>\\noptions + payload``.

    The length, not a separator, ends the options, so options and payload may hold anything (newlines,
    NUL); the name cannot hold a newline (task names are validated). One value instead of three fields
    is one hash entry less per task, and the scripts only store and return it.
    """
    return f"{name}\n{len(options)}\n{options}{payload}"


def decode_body(body: str) -> tuple[str, str, str]:
    """``(name, options, payload)`` from :func:`encode_body`'s text; ValueError if it is damaged."""
    name, newline, rest = body.partition("\n")
    length, newline2, rest = rest.partition("\n")
    size = int(length)
    if not (newline and newline2 and 0 <= size <= len(rest)):
        raise ValueError(f"not a task body: {body[:80]!r}")
    return name, rest[:size], rest[size:]


_UNSAFE = re.compile("[% \t\n\v\f\r]")  # Lua's %s (whitespace in the C locale), and the escape itself
_ESCAPED = re.compile("%([0-9A-F]{2})")


def escape_key(key: str) -> str:
    """A unique key without whitespace, as a row field must be: ``%`` and whitespace as ``%XX``."""
    return _UNSAFE.sub(lambda found: f"%{ord(found.group()):02X}", key)


def unescape_key(text: str) -> str:
    """The key :func:`escape_key` escaped (every ``%`` in it starts an escape)."""
    if "%" not in text:
        return text
    return _ESCAPED.sub(lambda found: chr(int(found.group(1), 16)), text)


def _key(field: str) -> str | None:
    """A row's unique key field: "-" or "=" + the escaped key."""
    return None if field == "-" else unescape_key(field[1:])


def encode_task(task: NewTask) -> list[str]:
    """The 8 ARGV values of one task for ``enqueue.lua``."""
    return [
        task.id,
        task.queue,
        encode_body(task.name, task.options, task.payload),
        str(int(task.priority)),
        _num(task.run_at),
        _num(task.expires_at),
        "" if task.unique_key is None else "=" + escape_key(task.unique_key),
        _num(task.unique_until),
    ]


#: What :func:`encode_task` gives for a field at its default (``None`` for the three always sent).
_DEFAULTS: tuple[str | None, ...] = (None, None, None, "0", "", "", "", "")


def encode_one_task(task: NewTask) -> list[str]:
    """:func:`encode_task` without the trailing values at their defaults, as ``enqueue.lua`` takes a
    one-task call (the server pays for each argument; a usual task sends three)."""
    fields = encode_task(task)
    end = len(fields)
    while end > 3 and fields[end - 1] == _DEFAULTS[end - 1]:
        end -= 1
    del fields[end:]
    return fields


def encode_outcome(outcome: Outcome) -> list[str]:
    """The 8 ARGV values of one outcome for ``settle.lua``; the last is ``keep_for`` for ``complete``, the
    retry limit for ``retry`` and ``archive`` ("" for none) followed by ``"\n"`` and the traceback when
    the outcome has one, "" for ``release``."""
    kind = outcome.kind
    if kind == "complete" and outcome.error is None and outcome.run_at is None and outcome.reason is None:
        # the usual outcome (every task a worker runs to the end): only its result and keep_for vary
        result = outcome.result
        return [outcome.task_id, outcome.token, kind, "" if result is None else "=" + result, "", "", "",
                repr(float(outcome.keep_for))]  # fmt: skip
    if kind not in ("complete", "retry", "archive", "release"):
        raise ValueError(f"unknown outcome kind {kind!r}")
    reason = None if outcome.reason is None else ArchiveReason(outcome.reason).value
    return [
        outcome.task_id,
        outcome.token,
        kind,
        opt(outcome.result),
        opt(outcome.error),
        _num(outcome.run_at),
        opt(reason),
        _last_value(outcome),
    ]


def _last_value(outcome: Outcome) -> str:
    if outcome.kind == "complete":
        return repr(float(outcome.keep_for))
    if outcome.kind == "release":
        return ""
    limit = "" if outcome.max_retries is None else str(int(outcome.max_retries))
    return limit if outcome.traceback is None else limit + "\n" + outcome.traceback


#: A row's field names in order (see the module docstring); the last, the body, may hold spaces.
ROW_NAMES = ("s", "m", "q", "x", "a", "c", "l", "ne", "tk", "lx", "sa", "fa", "ku", "r", "st", "pr", "ea", "fd", "ra",
             "nr", "ar", "uu", "uk", "b")  # fmt: skip
#: Fields in a row, its body included.
ROW_FIELDS = len(ROW_NAMES)
_LAST = ROW_FIELDS - 1  # splits of a row: its last field may hold spaces


def _row(row: str) -> list[str]:
    """A row's fields; ValueError unless it has all of them."""
    fields = row.split(" ", _LAST)
    if len(fields) != ROW_FIELDS:
        raise ValueError(f"not a task row: {row[:80]!r}")
    return fields


def _float(value: str) -> float | None:
    """A row's number, None for "-"."""
    return None if value == "-" else float(value)


def _count(value: str) -> int:
    """A row's count, 0 for "-" (counts at their start value may be written that way)."""
    return 0 if value == "0" or value == "-" else int(float(value))


def _text(value: str) -> str | None:
    """A row's text, None for "-"."""
    return None if value == "-" else value


def _errors(failures: Sequence[str]) -> tuple[ErrorEntry, ...]:
    errors = []
    for line in failures:
        try:
            attempt, at, error = line.split("\t", 2)
            errors.append(ErrorEntry(int(float(attempt)), float(at), error))
        except ValueError as exc:
            errors.append(ErrorEntry.undecodable(line, exc))
    return tuple(errors)


def _present(value: Any) -> bool:
    """redis-py gives None for an absent value, a script's JSON gives false."""
    return value is not None and value is not False


_NO_EXTRAS = (None, None, None)


def split_due(values: str | Sequence[Any]) -> tuple[str | Sequence[Any], float | None]:
    """``claim.lua``'s reply without the due time it may end with (a claim that took fewer tasks than
    its limit: "@<due>" starts its last string, see the script's header), and that time (None: none)."""
    tail = values if isinstance(values, str) else values[-1] if values else ""
    if not tail.startswith("@"):  # a row starts with its state, the JSON array with "["
        return values, None
    due, _, extras = tail[1:].partition("\n")
    return (extras if isinstance(values, str) else [*values[:-1], extras]), float(due)


def decode_claimed(values: str | Sequence[Any], now: float, lease_for: float, base: str) -> list[TaskRecord]:
    """The tasks ``claim.lua`` leased at ``now`` (its reply, see its header), as now stored.

    The reply holds each row as it was before the claim, then one string: "" or a JSON array of
    (position, last error, failures, retry limit) for the claimed tasks that have a last error or
    failures. The claim's own writes (state, attempts + 1, started_at, lease) are known here, so the
    script need not build a second row for the reply. A claim of one task without errors sends its row
    alone, an empty one "".
    A task whose values cannot be decoded (data damaged in Redis by hand) is logged and left out: its
    lease expires and the reaper archives it after ``max_stalls`` tries, so it cannot block the queue.
    Lease tokens count every task of the reply, left out or not, as the script numbered them.
    This runs for every task a worker claims: fields are unpacked inline and the record is built
    with positional arguments, in TaskRecord's field order (keywords and a helper call per field cost
    more; a Redis test checks a claimed record equals ``get()``).
    """
    if isinstance(values, str):  # "" (none), or the row of one task without errors
        values = [values, ""] if values else []
    if not values:
        return []
    extras: dict[int, tuple[Any, Any, Any]] = {}
    if values[-1]:
        try:
            found = json.loads(values[-1])
            for start in range(0, len(found), 4):
                position, last_error, failures, limit = found[start : start + 4]
                extras[int(position)] = (last_error, failures, limit)
        except (ValueError, TypeError):
            log.exception("claimed tasks' last errors and failures cannot be decoded: %r", values[-1])
    records: list[TaskRecord] = []
    append = records.append
    lease_expires_at = now + lease_for
    active = TaskState.ACTIVE
    for position in range(1, len(values)):
        row = values[position - 1]
        last_error, failures, limit = extras.get(position, _NO_EXTRAS)
        try:
            (_state, m, queue, x, a, _c, _l, _ne, _tk, _lx, _sa, _fa, _ku, r, st, pr, ea, fd, _ra, _nr, _ar, _uu,
             uk, body) = row.split(" ", _LAST)  # fmt: skip
            name, options, payload = decode_body(body)
            append(
                TaskRecord(
                    m[MEMBER_PREFIX:],
                    name,
                    queue,
                    active,
                    payload,
                    options,
                    0 if pr == "0" else _count(pr),
                    float(ea),
                    float(fd),
                    None,
                    1 if a == "0" else _count(a) + 1,
                    0 if r == "0" else _count(r),
                    0 if st == "0" else _count(st),
                    None if x == "-" else float(x),
                    None if uk == "-" else _key(uk),
                    now,
                    None,
                    None,
                    last_error if _present(last_error) else None,
                    None,
                    None,
                    _errors(failures) if failures else (),
                    f"{base}-{position}",
                    lease_expires_at,
                    False,
                    int(limit) if _present(limit) else None,
                )
            )
        except (ValueError, KeyError, TypeError, IndexError):
            log.exception("skipping a claimed task whose stored values cannot be decoded: %r", row)
    return records


def decode_record(item: Sequence[Any]) -> TaskRecord | None:
    """``[row, result, lasterr, failures, retry limit, traceback]`` as scripts return it (or a pipeline
    does; the traceback may be left out); None when the row is missing (no such task)."""
    row, result, last_error, failures, limit = item[:5]
    trace = item[5] if len(item) > 5 else None
    if not _present(row):
        return None
    (s, m, queue, x, a, c, _l, _ne, tk, lx, sa, fa, ku, r, st, pr, ea, fd, _ra, nr, ar, _uu,
     uk, body) = _row(row)  # fmt: skip
    name, options, payload = decode_body(body)
    state = TaskState(s)
    active = state is TaskState.ACTIVE
    reason = _text(ar)
    return TaskRecord(
        id=m[MEMBER_PREFIX:],
        name=name,
        queue=queue,
        state=state,
        payload=payload,
        options=options,
        priority=_count(pr),
        enqueued_at=float(ea),
        first_due_at=float(fd),
        next_run_at=_float(nr) if state in (TaskState.SCHEDULED, TaskState.RETRY) else None,
        attempts=_count(a),
        retries=_count(r),
        stalls=_count(st),
        expires_at=_float(x),
        unique_key=_key(uk),
        started_at=_float(sa),
        finished_at=None if state in UNFINISHED else _float(fa),
        keep_until=_float(ku),
        last_error=last_error if _present(last_error) else None,
        archive_reason=None if reason is None else ArchiveReason(reason),
        result=result if _present(result) else None,
        errors=_errors(failures) if failures else (),
        lease_token=_text(tk) if active else None,
        lease_expires_at=_float(lx) if active else None,
        cancel_requested=active and c == "1",
        max_retries=int(limit) if _present(limit) else None,
        traceback=trace if _present(trace) else None,
    )


def decode_history(minute: int, fields: dict[str, str]) -> list[QueueMinute]:
    """A minute's counters as ``settle.lua`` keeps them: field ``<c|r|a>:<queue>`` → count."""
    counts: dict[str, list[int]] = {}
    for field, value in fields.items():
        kind, _, queue = field.partition(":")
        counts.setdefault(queue, [0, 0, 0])["cra".index(kind)] += int(value)
    return [QueueMinute(queue, minute, *row) for queue, row in counts.items()]


def decode_events(blob: str, at: float) -> list[Event]:
    """Event lines ``id\\told\\tnew\\tqueue`` as scripts make them."""
    events = []
    for line in blob.split("\n"):
        task_id, old, new, queue = line.split("\t")
        events.append(Event(task_id, old or None, new, queue, at))
    return events


def encode_worker(info: WorkerInfo) -> str:
    """Its fields as one JSON object, in field order (tuples as arrays)."""
    return json.dumps(asdict(info))


def decode_worker(text: str) -> WorkerInfo:
    data = json.loads(text)
    return WorkerInfo(
        id=data["id"],
        host=data["host"],
        pid=int(data["pid"]),
        queues=tuple(data["queues"]),
        concurrency=int(data["concurrency"]),
        started_at=float(data["started_at"]),
        last_seen=float(data["last_seen"]),
        running=tuple(data["running"]),
        processed=int(data["processed"]),
        failed=int(data["failed"]),
    )
