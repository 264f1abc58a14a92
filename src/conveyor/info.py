"""The reading side of the app: a stored ``TaskRecord`` decoded for users as a ``TaskInfo``.

Never raises for what a record holds: undecodable arguments, options or results are shown as such
(``payload_error``, ``options_error``, the raw result), so one damaged row cannot break a listing.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.errors import SerializationError
from conveyor.model import TaskDeclaration, TaskInfo, TaskRecord
from conveyor.options import TaskOptions, describe_stored
from conveyor.serializers import decode, decode_payload

__all__ = ["task_info"]


def task_info(
    record: TaskRecord,
    registered: TaskOptions | None,
    declaration: Callable[[str], TaskDeclaration | None],
) -> TaskInfo:
    """``record`` for users: arguments, result, and the retry budget resolved from ``registered`` (this
    process's options for the name, if it registered it) and ``declaration`` (a lookup of what the
    workers serving a name declared, called only when the record itself does not say)."""
    payload_error = None
    try:
        args, kwargs = decode_payload(record.payload)
    except SerializationError as exc:
        args, kwargs, payload_error = [], {}, str(exc)
    stored, default_limit, options_error = describe_stored(record.options, registered)
    # The limit a worker recorded, else one given at enqueue, else what the workers serving the name
    # declared, else this process's registration; else unknown (never the library default).
    limit = record.max_retries
    if limit is None:
        if options_error is None and "max_retries" in stored:
            limit = default_limit
        elif (declared := declaration(record.name)) is not None:
            limit = declared.max_retries
        elif registered is not None:
            limit = default_limit
    result = None
    if record.result is not None:
        try:
            result = decode(record.result)
        except SerializationError:
            result = record.result
    return TaskInfo(
        id=record.id,
        name=record.name,
        queue=record.queue,
        state=record.state,
        args=args,
        kwargs=kwargs,
        attempts=record.attempts,
        max_retries=limit,
        retries_left=None if limit is None else max(0, limit - record.retries),
        next_run_at=record.next_run_at,
        last_error=record.last_error,
        archive_reason=record.archive_reason,
        result=result,
        priority=record.priority,
        enqueued_at=record.enqueued_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        expires_at=record.expires_at,
        keep_until=record.keep_until,
        stalls=record.stalls,
        errors=record.errors,
        lease_expires_at=record.lease_expires_at,
        cancel_requested=record.cancel_requested,
        options=stored,
        payload_error=payload_error,
        options_error=options_error,
        traceback=record.traceback,
        unique_key=record.unique_key,
    )
