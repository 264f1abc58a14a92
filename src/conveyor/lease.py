"""``Lease``: a task held by an external consumer (human-in-the-loop work, other languages).

Like SQS's visibility timeout: if the lease expires, the task is claimable again and this lease is
fenced: its calls raise ``LeaseLost`` and change nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from conveyor import outcomes
from conveyor._validate import check_after, check_positive, check_seconds
from conveyor.errors import LeaseLost, SerializationError, UnknownBackoff
from conveyor.model import Outcome, TaskInfo, TaskRecord
from conveyor.options import EffectiveOptions, decode_stored, resolve
from conveyor.serializers import encode

if TYPE_CHECKING:
    from conveyor.host import Host

__all__ = ["Lease"]

log = logging.getLogger("conveyor.lease")


class Lease:
    """A claimed task: ``task`` (TaskInfo), ``complete()``, ``fail()``, ``release()``, ``extend()``."""

    def __init__(self, app: Host, record: TaskRecord) -> None:
        assert record.lease_token is not None
        self._app = app
        self._record = record
        self.token: str = record.lease_token
        self.task: TaskInfo = app.to_info(record)
        assert record.lease_expires_at is not None
        self._expires_at = record.lease_expires_at

    @property
    def expires_at(self) -> float:
        """When the lease ends unless extended (epoch seconds, by the app's clock): the claim's
        deadline, or the latest ``extend``'s."""
        return self._expires_at

    def _options(self) -> EffectiveOptions:
        """The task's options; if its stored ones cannot be used here (damaged, or a backoff kind this
        process lacks), the registered ones: the consumer has done the work, and its result or failure
        is worth recording rather than refusing."""
        registered = self._app.handler(self._record.name)
        base = registered.options if registered else None
        try:
            return resolve(decode_stored(self._record.options), base)
        except (SerializationError, UnknownBackoff) as exc:
            log.warning("task %s: %s; its registered options apply", self._record.id, exc)
            return resolve({}, base)

    def _settle(self, outcome: Outcome) -> None:
        if not self._app.broker.settle([outcome], self._app.now())[0]:
            raise LeaseLost(self._record.id)

    def complete(self, result: Any = None) -> None:
        """Mark the task completed with ``result`` (JSON-encodable)."""
        payload = encode(result, "task result")
        self._settle(outcomes.complete(self._record, self.token, payload, self._options()))

    def fail(self, error: BaseException | str, retry: bool = True) -> None:
        """Record a failure: retried per the task's policy if ``retry`` and retries remain, else archived."""
        if not isinstance(error, (BaseException, str)):
            raise TypeError("error must be an exception or a message")
        outcome = outcomes.failure(
            self._record,
            self.token,
            error,
            self._options(),
            self._app.now(),
            self._app.rng,
            retryable=retry if retry is False or isinstance(error, str) else None,
        )
        self._settle(outcome)

    def release(self, delay: float = 0.0) -> None:
        """Give the task back (pending, or scheduled after ``delay``); no attempt is counted."""
        seconds = check_seconds("delay", delay) or 0.0
        now = self._app.now()
        run_at = check_after("delay", seconds, now) if seconds else None
        self._settle(Outcome(self._record.id, self.token, "release", run_at=run_at))

    def extend(self, seconds: float) -> float:
        """Hold the task ``seconds`` more from now; returns the new deadline. Raises LeaseLost."""
        check_positive("seconds", seconds)
        status = self._app.broker.extend(self._record.id, self.token, self._app.now(), float(seconds))
        if status is None:
            raise LeaseLost(self._record.id)
        self._expires_at = status.expires_at
        return status.expires_at

    def __repr__(self) -> str:
        return f"Lease(task_id={self._record.id!r}, expires_at={self.expires_at!r})"
