"""The cross-queue failed view (``/failed``), its "retry / delete all matching" (``/failed/bulk``) and
the text search (``/search``): filters in the query string, selections from ``conveyor.selection``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from conveyor.errors import BrokerError, ConveyorError
from conveyor.model import ArchiveReason, TaskState
from conveyor.selection import FAILED_STATES, TaskFilter, apply_all, parse_states
from conveyor.web.actions import back_to, read_form
from conveyor.web.dashboard import PAGE_SIZES, base_path, dashboard_of, message, render

__all__ = ["failed", "failed_bulk", "search"]

#: "Failed within" choices -> seconds.
SINCE = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
#: Which failure states the view reads.
KINDS = {"failed": FAILED_STATES, "archived": (TaskState.ARCHIVED,), "retry": (TaskState.RETRY,)}
#: Tasks a search looks at before it stops and says so.
SEARCH_SCAN = 5000
FILTER_KEYS = ("kind", "queue", "name", "reason", "error", "since")


def _params(source: Mapping[str, Any]) -> dict[str, str]:
    """The filter fields, trimmed and bounded (from a query string or a form)."""
    out = {}
    for key in FILTER_KEYS:
        value = source.get(key, "")
        value = (value[0] if value else "") if isinstance(value, list) else value
        out[key] = str(value).strip()[:200]
    return out


def filter_of(params: dict[str, str], now: float) -> TaskFilter:
    """The ``TaskFilter`` the fields describe; ValueError for a bad choice."""
    kind = params["kind"] or "failed"
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of: {', '.join(KINDS)}")
    since = params["since"]
    if since and since not in SINCE:
        raise ValueError(f"unknown period {since!r}; one of: {', '.join(SINCE)}")
    return TaskFilter(
        states=KINDS[kind],
        queues=(params["queue"],) if params["queue"] else (),
        name=params["name"] or None,
        reason=ArchiveReason(params["reason"]) if params["reason"] else None,
        error=params["error"] or None,
        since=now - SINCE[since] if since else None,
    )


def _page(request: Request) -> tuple[int, int]:
    raw_limit, raw_offset = request.query_params.get("limit", ""), request.query_params.get("offset", "")
    limit = int(raw_limit) if raw_limit.isdigit() and int(raw_limit) in PAGE_SIZES else 50
    return (int(raw_offset) if raw_offset.isdigit() else 0), limit


async def failed(request: Request) -> Response:
    """Failed (retry) and archived tasks of every queue, newest failure first, filtered."""
    dash = dashboard_of(request)
    params = _params(request.query_params)
    try:
        flt = filter_of(params, dash.conveyor.now())
        found = await run_in_threadpool(dash.conveyor.inspect.select, flt)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError) as exc:
        return message(request, str(exc), 400, back=f"{base_path(request)}/failed")
    offset, limit = _page(request)
    query = urlencode({k: v for k, v in params.items() if v})  # the pager's links (no job: it is shown once)
    return render(
        request,
        "failed.html",
        {
            "params": params,
            "query": query,
            "queues": [q.name for q in dash.conveyor.inspect.queues()],
            "kinds": list(KINDS),
            "reasons": [r.value for r in ArchiveReason],
            "periods": list(SINCE),
            "job": dash.jobs.get(request.query_params.get("job", "")),
            "found": found,
            "tasks": found.tasks[offset : offset + limit],
            "offset": offset,
            "limit": limit,
        },
    )


async def failed_bulk(request: Request) -> Response:
    """Retry or delete every task the posted filters select (all of them, server-side, in batches): a
    background job whose progress the failed view shows (``conveyor.web.jobs``)."""
    form = await read_form(request)
    if isinstance(form, Response):
        return form
    dash = dashboard_of(request)
    action = (form.get("action") or [""])[0]
    back = f"{base_path(request)}/failed"
    if action not in ("retry", "delete"):
        return message(request, f"unknown action {action!r}", 400, back=back)
    try:
        flt = filter_of(_params(form), dash.conveyor.now())
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError) as exc:
        return message(request, f"{action}: {exc}", 400, back=back)
    inspector = dash.conveyor.inspect
    job = dash.jobs.start(action, lambda progress: apply_all(inspector, flt, action, progress=progress))
    return back_to(request, form, back, job=job.id)


async def search(request: Request) -> Response:
    """``?id=``: go to that task. ``?q=``: the task with that id, else every task whose id, name,
    arguments or last error contain the text (a bounded scan that says when it was cut short)."""
    dash = dashboard_of(request)
    base = base_path(request)
    task_id = request.query_params.get("id", "").strip()
    text = request.query_params.get("q", "").strip()[:200]
    if not task_id and not text:
        return RedirectResponse(f"{base}/", status_code=303)
    try:
        info = dash.conveyor.inspect.get(task_id or text)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError, TypeError):
        if task_id:
            return message(request, f"no task with id {task_id!r}", 404)
    else:
        return RedirectResponse(f"{base}/tasks/{info.id}", status_code=303)
    try:
        states = parse_states(request.query_params.getlist("state")) or tuple(TaskState)
        flt = TaskFilter(states=states, text=text)
    except ValueError as exc:
        return message(request, str(exc), 400)
    found = await run_in_threadpool(dash.conveyor.inspect.select, flt, SEARCH_SCAN)
    offset, limit = _page(request)
    return render(
        request,
        "search.html",
        {"q": text, "found": found, "tasks": found.tasks[offset : offset + limit], "offset": offset, "limit": limit},
    )
