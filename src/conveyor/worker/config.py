"""``WorkerConfig``: every worker setting, with its default, in one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor._validate import check_positive, check_queue, check_seconds

__all__ = ["WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one worker.

    queues: served in this order (the first is drained first).
    lease_for: seconds a claim holds a task before another worker may take it (10 s); the heartbeat
        renews it every ``heartbeat_interval`` (lease_for / 5) while the handler runs.
    unregistered_delay / unregistered_window: a task whose name this worker does not know is put back
        ``unregistered_delay`` seconds later (30 s), until ``unregistered_window`` seconds (1 h) after it
        was first due; then it is archived ``unregistered``. Rolling deploys lose nothing.
    """

    queues: tuple[str, ...] = ("default",)
    lease_for: float = 10.0
    heartbeat_interval: float | None = None
    unregistered_delay: float = 30.0
    unregistered_window: float = 3600.0

    def __post_init__(self) -> None:
        if not isinstance(self.queues, tuple) or not self.queues:
            raise ValueError("queues must be a non-empty tuple of queue names")
        for queue in self.queues:
            check_queue(queue)
        check_positive("lease_for", self.lease_for)
        check_positive("heartbeat_interval", self.heartbeat_interval, allow_none=True)
        check_seconds("unregistered_delay", self.unregistered_delay)
        check_seconds("unregistered_window", self.unregistered_window)

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease_for / 5
