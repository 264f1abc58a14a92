"""Preparing one claimed task and deciding its outcome: decode, look the handler up by name, and map
a result or an exception to an ``Outcome``.

The executor never touches the broker's state itself; it returns an ``Outcome`` for the caller to
settle (fenced by the lease token). Calling the handler (with middleware, timeouts, sync or async)
is ``runner.py``'s job.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from conveyor import outcomes
from conveyor.context import TaskContext
from conveyor.errors import SerializationError, UnknownTask
from conveyor.model import ArchiveReason, LeaseStatus, Outcome, TaskRecord
from conveyor.options import EffectiveOptions, TaskOptions, resolve
from conveyor.serializers import decode, decode_payload, encode
from conveyor.worker.config import WorkerConfig

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Executor", "Job"]

log = logging.getLogger("conveyor.worker")


@dataclass(slots=True)
class Job:
    """A claimed task ready to run."""

    record: TaskRecord
    token: str
    fn: Any
    args: list[Any]
    kwargs: dict[str, Any]
    options: EffectiveOptions
    ctx: TaskContext
    is_async: bool


def _extend_lease(app: Conveyor, task_id: str, token: str, seconds: float) -> LeaseStatus | None:
    """``ctx.extend()`` of a running task: one ``Broker.extend`` of its lease (None: the lease is lost)."""
    return app.broker.extend(task_id, token, app.now(), seconds)


class Executor:
    """Turns claimed records into outcomes."""

    def __init__(self, app: Conveyor, config: WorkerConfig) -> None:
        self.app = app
        self.config = config
        # Options of tasks enqueued without explicit options, per task name: resolved once (a
        # registration's options are frozen), not once per execution.
        self._registered_options: dict[str, EffectiveOptions] = {}
        # Per handler function: (is async, takes a TaskContext first), looked up once, not per execution.
        self._kinds: dict[Any, tuple[bool, bool]] = {}

    def prepare(self, record: TaskRecord) -> Job | Outcome:
        """A Job to run, or at once an Outcome (unknown name → put back / archived; bad payload → poison)."""
        assert record.lease_token is not None
        token = record.lease_token
        task = self.app.handler(record.name)
        if task is None:
            return self._unregistered(record, token)
        try:
            args, kwargs = decode_payload(record.payload)
            options = self._options(record, task.options)
        except (SerializationError, ValueError, KeyError, TypeError) as exc:
            return Outcome(record.id, token, "archive", error=outcomes.describe(exc), reason=ArchiveReason.POISON)
        app = self.app
        ctx = TaskContext(
            partial(app.to_info, record),
            partial(_extend_lease, app, record.id, token),
            task_id=record.id,
            name=record.name,
            queue=record.queue,
            attempt=record.attempts,
        )
        fn = task.fn
        kind = self._kinds.get(fn)
        if kind is None:
            kind = self._kinds[fn] = (inspect.iscoroutinefunction(fn), self.app.wants_context(record.name))
        if kind[1]:
            args = [ctx, *args]
        return Job(record, token, fn, args, kwargs, options, ctx, kind[0])

    def _options(self, record: TaskRecord, registered: TaskOptions) -> EffectiveOptions:
        if record.options == "{}":
            cached = self._registered_options.get(record.name)
            if cached is None:
                cached = self._registered_options[record.name] = resolve({}, registered)
            return cached
        stored = decode(record.options)
        if not isinstance(stored, dict):
            raise SerializationError("task options are not a JSON object")
        return resolve(stored, registered)

    def _unregistered(self, record: TaskRecord, token: str) -> Outcome:
        now = self.app.now()
        error = outcomes.describe(UnknownTask(f"no handler registered for task name {record.name!r}"))
        if now - record.first_due_at >= self.config.unregistered_window:
            return Outcome(record.id, token, "archive", error=error, reason=ArchiveReason.UNREGISTERED)
        log.warning(
            "task %s: unknown name %r, putting it back for %.0f s",
            record.id,
            record.name,
            self.config.unregistered_delay,
        )
        return Outcome(record.id, token, "release", error=error, run_at=now + self.config.unregistered_delay)

    def succeeded(self, job: Job, result: Any) -> Outcome:
        try:
            payload = encode(result, "task result")
        except SerializationError as exc:
            return self.failed(job, exc, retryable=False)
        return outcomes.complete(job.record, job.token, payload, job.options)

    def failed(self, job: Job, exc: BaseException, *, retryable: bool | None = None) -> Outcome:
        if job.ctx.cancel_requested:
            return Outcome(
                job.record.id, job.token, "archive", error=outcomes.describe(exc), reason=ArchiveReason.CANCELLED
            )
        return outcomes.failure(
            job.record, job.token, exc, job.options, self.app.now(), self.app.rng, retryable=retryable
        )
