"""``Middleware``: hooks around every task a worker runs (metrics, logging, tracing plug in here).

Order: for middleware ``[a, b]``, ``before`` runs ``a`` then ``b``; ``on_error`` and ``after`` run in
reverse (``b`` then ``a``), like nested context managers. ``on_error(ctx, exc)`` is called when the
handler raised (before the outcome is decided); ``after(ctx, outcome)`` once the outcome is decided
and before it is acknowledged to the broker; an ``async def`` handler cancelled from outside gets its
``after`` too, though nothing is acknowledged (an operator's cancel: archived ``cancelled``, as a sync
handler's; a lost lease or a stop past the grace: ``release``), so every ``before`` has its ``after``.
A raising hook is logged and never changes the outcome.
Hooks run in the thread (or, for ``async def`` handlers, on the event loop) that runs the task: keep
them quick and non-blocking. ``on_claim(queues, seconds, claimed)`` is told of each claim call the
worker makes to the broker (one call claims a batch), in the thread that made it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from conveyor.context import HasContext, TaskContext
from conveyor.model import Outcome

__all__ = ["Middleware", "call_after", "call_before", "call_on_claim", "call_on_error"]

log = logging.getLogger("conveyor.worker")


class Middleware:
    """Base class: override any of the three hooks (each does nothing by default)."""

    def before(self, ctx: TaskContext) -> None:
        """The task is about to run."""

    def after(self, ctx: TaskContext, outcome: Outcome) -> None:
        """The task ran; ``outcome.kind`` is ``complete``, ``retry``, ``archive`` or ``release``."""

    def on_error(self, ctx: TaskContext, exc: BaseException) -> None:
        """The handler raised ``exc`` (called before ``after``)."""

    def on_claim(self, queues: Sequence[str], seconds: float, claimed: int) -> None:
        """One claim call over ``queues`` (in the order asked) took ``seconds`` and leased ``claimed``
        tasks (0 when none was ready). Claims made behind a wait for work are not reported: their
        time is mostly the wait (Redis, when a worker was idle)."""


def call_before(middleware: Sequence[Middleware], task: HasContext) -> None:
    """The hooks' ``before``, in order. ``task.ctx`` is read only when there are hooks (a running job
    builds its context on first use): so are ``call_on_error``'s and ``call_after``'s."""
    for hook in middleware:
        _safe(hook, "before", task.ctx)


def call_on_error(middleware: Sequence[Middleware], task: HasContext, exc: BaseException) -> None:
    for hook in reversed(middleware):
        _safe(hook, "on_error", task.ctx, exc)


def call_after(middleware: Sequence[Middleware], task: HasContext, outcome: Outcome) -> None:
    for hook in reversed(middleware):
        _safe(hook, "after", task.ctx, outcome)


def call_on_claim(middleware: Sequence[Middleware], queues: Sequence[str], seconds: float, claimed: int) -> None:
    for hook in middleware:
        _safe(hook, "on_claim", queues, seconds, claimed)


def _safe(hook: Middleware, method: str, *args: object) -> None:
    try:
        getattr(hook, method)(*args)
    except Exception:
        log.exception("middleware %r.%s raised; ignored", hook, method)
