"""``Executor``: decides, never runs. It prepares one claimed task (decode, look the handler up by name:
a ``Job``) and maps a result or an exception to an ``Outcome``.

The executor never touches the broker's state itself; it returns an ``Outcome`` for the caller to
settle (fenced by the lease token). Calling the handler (with middleware, timeouts, sync or async)
is ``runner.py``'s job.
"""

from __future__ import annotations

import inspect
import logging
import threading
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from conveyor import outcomes
from conveyor.context import TaskContext
from conveyor.errors import BrokerError, SerializationError, UnknownBackoff, UnknownTask
from conveyor.model import ArchiveReason, LeaseStatus, Outcome, TaskRecord, TaskState
from conveyor.names import did_you_mean
from conveyor.options import EffectiveOptions, TaskOptions, decode_stored, resolve
from conveyor.serializers import decode_payload, encode
from conveyor.worker.config import WorkerConfig

if TYPE_CHECKING:
    from conveyor.brokers.base import Broker
    from conveyor.clock import Clock
    from conveyor.host import Host

__all__ = ["Executor", "Job", "lost_to_cancel"]

log = logging.getLogger("conveyor.worker")


#: Guards the one-time construction of a job's context: the handler's thread and the heartbeat's
#: (marking the lease lost, a cancel, a timeout) may both ask for it first.
_CONTEXT_LOCK = threading.Lock()


@dataclass(slots=True)
class Job:
    """A claimed task ready to run.

    Its :class:`TaskContext` is built on first use (``ctx``): by the handler (a ``TaskContext``
    parameter, ``current_task()``), by middleware, or by a service telling it something (lease lost,
    cancel requested, timeout). Most handlers never ask, and building it for each of them (two
    partials and a context, and the collector work for them) was a visible share of a no-op drain's
    client CPU (docs/performance-notes.md).
    """

    record: TaskRecord
    token: str
    fn: Any
    args: list[Any]
    kwargs: dict[str, Any]
    options: EffectiveOptions
    is_async: bool
    app: Host
    built_ctx: TaskContext | None = None  # None until ``ctx`` is first read

    @property
    def ctx(self) -> TaskContext:
        ctx = self.built_ctx
        if ctx is None:
            with _CONTEXT_LOCK:
                ctx = self.built_ctx
                if ctx is None:
                    ctx = self.built_ctx = _new_context(self.app, self.record, self.token)
        return ctx


def _new_context(app: Host, record: TaskRecord, token: str) -> TaskContext:
    return TaskContext(
        partial(app.to_info, record),
        partial(_extend_lease, app, record.id, token),
        task_id=record.id,
        name=record.name,
        queue=record.queue,
        attempt=record.attempts,
        was_cancelled=partial(lost_to_cancel, app.broker, app.clock, record.id),
    )


def lost_to_cancel(broker: Broker, clock: Clock, task_id: str) -> bool:
    """Whether a lease found lost was taken by an operator's cancel: the task is archived ``cancelled``
    (``Broker.cancel`` revokes a running task's lease). False too when the broker cannot say now."""
    try:
        record = broker.get(task_id, float(clock()))
    except BrokerError:
        return False
    return (
        record is not None and record.state is TaskState.ARCHIVED and record.archive_reason is ArchiveReason.CANCELLED
    )


def _extend_lease(app: Host, task_id: str, token: str, seconds: float) -> LeaseStatus | None:
    """``ctx.extend()`` of a running task: one ``Broker.extend`` of its lease (None: the lease is lost)."""
    return app.broker.extend(task_id, token, app.now(), seconds)


class Executor:
    """Turns claimed records into outcomes."""

    def __init__(self, app: Host, config: WorkerConfig) -> None:
        self.app = app
        self.config = config
        # Options of tasks enqueued without explicit options, per task name: resolved once (a
        # registration's options are frozen), not once per execution.
        self._registered_options: dict[str, EffectiveOptions] = {}
        # Per handler function: (is async, takes a TaskContext first), looked up once, not per execution.
        self._kinds: dict[Any, tuple[bool, bool]] = {}
        self._hints: dict[str, str] = {}  # per unknown task name: the registered one it may mean

    def prepare(self, record: TaskRecord) -> Job | Outcome:
        """A Job to run, or at once an Outcome (unknown name → put back / archived; bad payload → poison)."""
        assert record.lease_token is not None
        token = record.lease_token
        task = self.app.handler(record.name)
        if task is None:
            hint = self._hints.get(record.name)
            if hint is None:  # (once per unknown name: a flood of them is a flood of lookups)
                hint = self._hints[record.name] = did_you_mean(record.name, self.app.registry)
            return self._unregistered(
                record, token, UnknownTask(f"no handler registered for task name {record.name!r}{hint}")
            )
        try:
            args, kwargs = decode_payload(record.payload)
            options = self._options(record, task.options)
        except UnknownBackoff as exc:
            # This worker lacks the code the producer had (a rolling deploy): as for an unknown name.
            return self._unregistered(record, token, exc)
        except (SerializationError, ValueError, KeyError, TypeError) as exc:
            return Outcome(record.id, token, "archive", error=outcomes.describe(exc), reason=ArchiveReason.POISON)
        fn = task.fn
        kind = self._kinds.get(fn)
        if kind is None:
            kind = self._kinds[fn] = (inspect.iscoroutinefunction(fn), self.app.wants_context(record.name))
        job = Job(record, token, fn, args, kwargs, options, kind[0], self.app)
        if kind[1]:
            job.args = [job.ctx, *args]
        return job

    def _options(self, record: TaskRecord, registered: TaskOptions) -> EffectiveOptions:
        if record.options == "{}":
            cached = self._registered_options.get(record.name)
            if cached is None:
                cached = self._registered_options[record.name] = resolve({}, registered)
            return cached
        return resolve(decode_stored(record.options), registered)

    def _unregistered(self, record: TaskRecord, token: str, missing: UnknownTask | UnknownBackoff) -> Outcome:
        """Put back a task this worker lacks the code for (its name, or its backoff's kind) for
        ``unregistered_delay``; archive it ``unregistered`` once ``unregistered_window`` has passed."""
        now = self.app.now()
        error = outcomes.describe(missing)
        if now - record.first_due_at >= self.config.unregistered_window:
            return Outcome(record.id, token, "archive", error=error, reason=ArchiveReason.UNREGISTERED)
        log.warning(
            "task %s (%s): %s; putting it back for %.0f s",
            record.id,
            record.name,
            missing,
            self.config.unregistered_delay,
        )
        return Outcome(record.id, token, "release", error=error, run_at=now + self.config.unregistered_delay)

    def succeeded(self, job: Job, result: Any) -> Outcome:
        if job.built_ctx is not None and job.built_ctx.cancelled:  # the broker fences it anyway
            return _cancelled(job, None)
        try:
            payload = encode(result, "task result")
        except SerializationError as exc:
            return self.failed(job, exc, retryable=False)
        return outcomes.complete(job.record, job.token, payload, job.options)

    def interrupted(self, job: Job) -> Outcome:
        """What a run cancelled from outside ended as, for middleware (nothing settles it): an
        operator's cancel as :meth:`succeeded` reports one, else (lease lost, shutdown) a release."""
        if job.built_ctx is not None and job.built_ctx.cancelled:
            return _cancelled(job, None)
        return Outcome(job.record.id, job.token, "release")

    def heard(self, job: Job, outcome: Outcome) -> Outcome:
        """What middleware's ``after`` hears of a run that decided ``outcome``: a run whose lease was
        lost meanwhile (taken back at the end of a shutdown's grace, or by another worker) is not
        settled by it, so it ended as :meth:`interrupted` says, whatever its handler did."""
        ctx = job.built_ctx
        if ctx is None or not ctx.lease_lost:  # a lost lease always has its context built (mark_lost)
            return outcome
        return self.interrupted(job)

    def failed(self, job: Job, exc: BaseException, *, retryable: bool | None = None) -> Outcome:
        if job.built_ctx is not None and job.built_ctx.cancelled:  # only a context learns of a cancel
            return _cancelled(job, outcomes.describe(exc))
        return outcomes.failure(
            job.record, job.token, exc, job.options, self.app.now(), self.app.rng, retryable=retryable
        )


def _cancelled(job: Job, error: str | None) -> Outcome:
    """A cancelled task's outcome, whatever its handler did. The broker archived it ``cancelled`` and
    revoked its lease when it was cancelled, so settling this only reports it (the settle is fenced)."""
    return Outcome(
        job.record.id,
        job.token,
        "archive",
        error=error,
        reason=ArchiveReason.CANCELLED,
        max_retries=job.options.max_retries,
    )
