"""Between Redis replies and the model's dataclasses: task hashes, outcomes, events, worker info.

A task hash holds (absent field = None): ``n`` name, ``q`` queue, ``s`` state, ``m`` member
(``%016d(seq) + id``), ``p`` payload, ``o`` options, ``pr`` priority, ``ea`` enqueued_at, ``fd``
first_due_at, ``ra`` ready_at, ``nr`` next_run_at, ``a`` attempts, ``r`` retries, ``st`` stalls, ``x``
expires_at, ``uk``/``uu`` unique key/until, ``sa`` started_at, ``fa`` finished_at, ``ku`` keep_until,
``le`` last error, ``ar`` archive reason, ``res`` result, ``tk`` lease token, ``lx`` lease deadline,
``c`` cancel requested ("1"). Fields at their usual value are not written by ``enqueue``: ``a``/``r``/
``st`` are absent until they first change (read as 0), ``pr`` when 0, ``o`` when ``{}``, and ``ra`` reads
as ``ea`` while absent (a task enqueued pending became ready when it was enqueued).
``tk``, ``lx`` and ``c`` mean something only while the task is active and ``nr`` only while it is
scheduled or retry: transitions out of those states leave them as they were (fewer writes on the hot
path) and every reader ignores them in other states.
Failures live in a list beside it, ``attempt\\tat\\terror`` each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from conveyor.model import ArchiveReason, ErrorEntry, Event, NewTask, Outcome, TaskRecord, TaskState, WorkerInfo

__all__ = [
    "CLAIM_STRIDE",
    "decode_claimed",
    "decode_events",
    "decode_record",
    "decode_worker",
    "encode_one_task",
    "encode_outcome",
    "encode_task",
    "encode_worker",
    "opt",
]

log = logging.getLogger("conveyor.brokers.redis")

MEMBER_PREFIX = 16  # width of the zero-padded enqueue sequence in front of the id


def opt(value: str | None) -> str:
    """An optional string as scripts expect it: "" for None, else "=" + value."""
    return "" if value is None else "=" + value


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def encode_task(task: NewTask) -> list[str]:
    """The 10 ARGV values of one task for ``enqueue.lua``."""
    return [
        task.id,
        task.name,
        task.queue,
        task.payload,
        str(int(task.priority)),
        _num(task.run_at),
        _num(task.expires_at),
        opt(task.unique_key),
        _num(task.unique_until),
        task.options,
    ]


#: What :func:`encode_task` gives for a field at its default (``None`` for the four always sent).
_DEFAULTS: tuple[str | None, ...] = (None, None, None, None, "0", "", "", "", "", "{}")


def encode_one_task(task: NewTask) -> list[str]:
    """:func:`encode_task` without the trailing values at their defaults, as ``enqueue.lua`` takes a
    one-task call (each argument costs the server ~0.2 µs; a usual task sends four)."""
    fields = encode_task(task)
    end = len(fields)
    while end > 4 and fields[end - 1] == _DEFAULTS[end - 1]:
        end -= 1
    del fields[end:]
    return fields


def encode_outcome(outcome: Outcome) -> list[str]:
    """The 8 ARGV values of one outcome for ``settle.lua``."""
    if outcome.kind not in ("complete", "retry", "archive", "release"):
        raise ValueError(f"unknown outcome kind {outcome.kind!r}")
    reason = None if outcome.reason is None else ArchiveReason(outcome.reason).value
    return [
        outcome.task_id,
        outcome.token,
        outcome.kind,
        opt(outcome.result),
        opt(outcome.error),
        _num(outcome.run_at),
        opt(reason),
        repr(float(outcome.keep_for)),
    ]


def _f(fields: dict[str, str], key: str) -> float | None:
    value = fields.get(key)
    return None if value is None or value == "" else float(value)


def _errors(failures: Sequence[str]) -> tuple[ErrorEntry, ...]:
    errors = []
    for line in failures:
        attempt, at, error = line.split("\t", 2)
        errors.append(ErrorEntry(int(float(attempt)), float(at), error))
    return tuple(errors)


#: Values per task in ``claim.lua``'s reply.
CLAIM_STRIDE = 15


def decode_claimed(values: Sequence[Any], now: float, lease_for: float, base: str) -> list[TaskRecord]:
    """The tasks ``claim.lua`` leased at ``now`` (its flat reply, see its header), as now stored.

    A task whose fields cannot be decoded (data damaged in Redis by hand) is logged and left out: its
    lease expires and the reaper archives it after ``max_stalls`` tries, so it cannot block the queue.
    """
    records = []
    lease_expires_at = now + lease_for
    for position, start in enumerate(range(0, len(values), CLAIM_STRIDE), 1):
        row = values[start : start + CLAIM_STRIDE]
        try:
            (task_id, name, queue, payload, options, priority, enqueued, due, expires, unique, attempts, retries,
             stalls, last_error, failures) = row  # fmt: skip
            records.append(
                TaskRecord(
                    id=task_id,
                    name=name or "",
                    queue=queue,
                    state=TaskState.ACTIVE,
                    payload=payload or "",
                    options=options or "{}",
                    priority=int(priority or 0),
                    enqueued_at=float(enqueued or 0),
                    first_due_at=float(due or 0),
                    next_run_at=None,
                    attempts=int(attempts or 0) + 1,
                    retries=int(retries or 0),
                    stalls=int(stalls or 0),
                    expires_at=float(expires) if expires else None,
                    unique_key=unique if unique is not False else None,
                    started_at=now,
                    last_error=last_error if last_error is not False else None,
                    errors=_errors(failures) if failures else (),
                    lease_token=f"{base}-{position}",
                    lease_expires_at=lease_expires_at,
                )
            )
        except (ValueError, KeyError, TypeError):
            log.exception("skipping a claimed task whose stored fields cannot be decoded: %r", row)
    return records


def decode_record(item: Sequence[Any]) -> TaskRecord | None:
    """``{flat HGETALL, failures}`` as scripts return it (or a pipeline does); None for a missing hash."""
    flat, failures = item[0], item[1]
    h: dict[str, str] = dict(zip(flat[::2], flat[1::2], strict=True))
    if "s" not in h or "m" not in h or "q" not in h:
        return None
    state = TaskState(h["s"])
    active = state is TaskState.ACTIVE
    reason = h.get("ar") or None
    return TaskRecord(
        id=h["m"][MEMBER_PREFIX:],
        name=h.get("n", ""),
        queue=h["q"],
        state=state,
        payload=h.get("p", ""),
        options=h.get("o", "{}"),
        priority=int(h.get("pr", "0")),
        enqueued_at=float(h.get("ea", "0")),
        first_due_at=float(h.get("fd", "0")),
        next_run_at=_f(h, "nr") if state in (TaskState.SCHEDULED, TaskState.RETRY) else None,
        attempts=int(h.get("a", "0")),
        retries=int(h.get("r", "0")),
        stalls=int(h.get("st", "0")),
        expires_at=_f(h, "x"),
        unique_key=h.get("uk"),
        started_at=_f(h, "sa"),
        finished_at=_f(h, "fa"),
        keep_until=_f(h, "ku"),
        last_error=h.get("le"),
        archive_reason=None if reason is None else ArchiveReason(reason),
        result=h.get("res"),
        errors=_errors(failures),
        lease_token=(h.get("tk") or None) if active else None,
        lease_expires_at=_f(h, "lx") if active else None,
        cancel_requested=active and h.get("c") == "1",
    )


def decode_events(blob: str, at: float) -> list[Event]:
    """Event lines ``id\\told\\tnew\\tqueue`` as scripts make them."""
    events = []
    for line in blob.split("\n"):
        task_id, old, new, queue = line.split("\t")
        events.append(Event(task_id, old or None, new, queue, at))
    return events


def encode_worker(info: WorkerInfo) -> str:
    return json.dumps(
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "queues": list(info.queues),
            "concurrency": info.concurrency,
            "started_at": info.started_at,
            "last_seen": info.last_seen,
            "running": list(info.running),
            "processed": info.processed,
            "failed": info.failed,
        }
    )


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
