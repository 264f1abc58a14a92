"""Read-only pages and endpoints: overview, queue, task, the JSON feed, /metrics (raw and readable), /healthz."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from conveyor.errors import BrokerError, ConveyorError
from conveyor.inspect import Inspector
from conveyor.metrics import CONTENT_TYPE
from conveyor.web.dashboard import PAGE_SIZES, STATES, Dashboard, dashboard_of, message, render
from conveyor.web.readable import families
from conveyor.web.series import RANGES, chart_series

__all__ = ["healthz", "metrics", "metrics_page", "overview", "overview_json", "queue", "task"]


def _range(request: Request) -> str:
    """The charts' range from ``?range=`` (an unknown one falls back to the default)."""
    value = request.query_params.get("range", "1h")
    return value if value in RANGES else "1h"


def _overview_data(dash: Dashboard, range_name: str = "1h") -> dict[str, Any]:
    inspector = dash.conveyor.inspect
    now = dash.conveyor.now()
    queues = [
        {
            "name": q.name,
            "paused": q.settings.paused,
            "counts": q.counts,
            "oldest_pending_age": None if q.oldest_pending_at is None else max(0.0, now - q.oldest_pending_at),
        }
        for q in inspector.queues()
    ]
    workers = [
        {
            "id": w.id,
            "host": w.host,
            "pid": w.pid,
            "queues": list(w.queues),
            "concurrency": w.concurrency,
            "started_at": w.started_at,
            "heartbeat_age": max(0.0, now - w.last_seen),
            "running": list(w.running),
            "processed": w.processed,
            "failed": w.failed,
        }
        for w in inspector.workers()
    ]
    series = chart_series(dash.conveyor, range_name)
    return {
        "now": now,
        "states": STATES,
        "queues": queues,
        "workers": workers,
        "series": series,
        "range": range_name,
        "ranges": list(RANGES),
    }


async def overview(request: Request) -> Response:
    return render(request, "overview.html", _overview_data(dashboard_of(request), _range(request)))


async def overview_json(request: Request) -> Response:
    return JSONResponse(_overview_data(dashboard_of(request), _range(request)))


def _int_param(request: Request, name: str, default: int, minimum: int = 0) -> int:
    raw = request.query_params.get(name, "")
    return max(minimum, int(raw)) if raw.isdigit() else default


async def queue(request: Request) -> Response:
    dash = dashboard_of(request)
    name = request.path_params["queue"]
    state = request.query_params.get("state", "pending")
    if state not in STATES:
        return message(request, f"unknown state {state!r}", 400)
    limit = _int_param(request, "limit", 50, 1)
    limit = limit if limit in PAGE_SIZES else 50
    offset = _int_param(request, "offset", 0)
    try:
        tasks = dash.conveyor.inspect.list(name, state, offset=offset, limit=limit)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError, TypeError) as exc:
        return message(request, str(exc), 400)
    info = next((q for q in dash.conveyor.inspect.queues() if q.name == name), None)
    if info is None:
        return message(request, f"queue not found: {name!r}", 404)
    counts = info.counts
    return render(
        request,
        "queue.html",
        {
            "queue": name,
            "paused": info.settings.paused,
            "partitions": info.settings.partitions,
            "counts": counts,
            "state": state,
            "tasks": tasks,
            "offset": offset,
            "limit": limit,
            "total": counts.get(state, 0),
        },
    )


async def task(request: Request) -> Response:
    dash = dashboard_of(request)
    task_id = request.path_params["task_id"]
    try:
        info = dash.conveyor.inspect.get(task_id)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError, TypeError) as exc:
        return message(request, str(exc), 404)
    return render(request, "task.html", {"task": info, "timeline": Inspector.timeline(info)})


async def metrics(request: Request) -> Response:
    dash = dashboard_of(request)
    assert dash.metrics is not None
    return Response(dash.metrics.render(), media_type=CONTENT_TYPE)


async def metrics_page(request: Request) -> Response:
    """The metrics as tables (the nav's "Metrics" link); ``/metrics`` stays the raw text."""
    dash = dashboard_of(request)
    assert dash.metrics is not None
    return render(request, "metrics.html", {"families": families(dash.metrics.render().decode())})


async def healthz(request: Request) -> Response:
    """200 when the broker answers, 503 otherwise (no authentication: it reveals nothing)."""
    try:
        dashboard_of(request).conveyor.inspect.queues()
    except (ConveyorError, OSError) as exc:
        return JSONResponse({"ok": False, "error": type(exc).__name__}, status_code=503)
    return JSONResponse({"ok": True})
