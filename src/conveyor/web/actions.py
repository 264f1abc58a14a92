"""State-changing endpoints (POST only, CSRF-checked, refused in read-only mode). Each calls one
``Inspector`` method and redirects (303) back to the page it came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from conveyor.errors import BrokerError, ConveyorError
from conveyor.inspect import Inspector
from conveyor.web.dashboard import base_path, dashboard_of, message

__all__ = ["back_to", "bulk_action", "queue_action", "read_form", "task_action"]

TASK_ACTIONS: dict[str, Callable[[Inspector, str], Any]] = {
    "run-now": Inspector.run_now,
    "archive": Inspector.archive,
    "delete": Inspector.delete,
    "cancel": Inspector.cancel,
}
MAX_FORM = 1 << 20  # bytes


async def read_form(request: Request) -> dict[str, list[str]] | Response:
    """The url-encoded form, after the read-only, size and CSRF checks (or the refusal)."""
    dash = dashboard_of(request)
    if dash.read_only:
        return message(request, "the dashboard is read-only", 403)
    body = await request.body()
    if len(body) > MAX_FORM:
        return message(request, "form too large", 413)
    form: dict[str, list[str]] = {}
    for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        form.setdefault(key, []).append(value)
    if not dash.csrf.valid(request, (form.get("csrf") or [""])[0]):
        return message(request, "invalid or missing CSRF token: reload the page and try again", 403)
    return form


def back_to(request: Request, form: dict[str, list[str]], default: str, **flash: Any) -> Response:
    """Redirect to ``next`` if it is a path inside the dashboard, else ``default``; with a flash code."""
    base = base_path(request)
    target = (form.get("next") or [""])[0]
    if not target.startswith(base + "/") or target.startswith("//") or "\\" in target:
        target = default
    path, _, query = target.partition("?")
    params = [(k, v) for k, v in parse_qsl(query) if k not in ("done", "n", "failed", "why", "job")]
    params += [(k, str(v)) for k, v in flash.items()]
    return RedirectResponse(f"{path}?{urlencode(params)}", status_code=303)


async def task_action(request: Request) -> Response:
    action = request.path_params["action"]
    task_id = request.path_params["task_id"]
    if action not in TASK_ACTIONS:
        return message(request, f"unknown action {action!r}", 404)
    form = await read_form(request)
    if isinstance(form, Response):
        return form
    inspector = dashboard_of(request).conveyor.inspect
    base = base_path(request)
    default = f"{base}/tasks/{task_id}"
    try:
        if action == "delete":
            default = f"{base}/queues/{inspector.get(task_id).queue}"
        TASK_ACTIONS[action](inspector, task_id)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError, TypeError) as exc:
        return message(request, f"{action}: {exc}", 409, back=f"{base}/tasks/{task_id}")
    if action == "delete" and (form.get("next") or [""])[0].split("?")[0] == f"{base}/tasks/{task_id}":
        form.pop("next")  # that page is gone
    return back_to(request, form, default, done=action, n=1)


async def queue_action(request: Request) -> Response:
    action = request.path_params["action"]
    name = request.path_params["queue"]
    if action not in ("pause", "resume", "purge"):
        return message(request, f"unknown action {action!r}", 404)
    form = await read_form(request)
    if isinstance(form, Response):
        return form
    inspector = dashboard_of(request).conveyor.inspect
    flash: dict[str, Any] = {"done": action}
    try:
        inspector.queue(name)  # QueueNotFound: never a new queue from a forged form or a stale page
        if action == "pause":
            inspector.pause(name)
        elif action == "resume":
            inspector.resume(name)
        else:
            flash["n"] = inspector.purge(name, (form.get("state") or [""])[0])
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError, TypeError) as exc:
        return message(request, f"{action}: {exc}", 409, back=f"{base_path(request)}/queues/{name}")
    return back_to(request, form, f"{base_path(request)}/queues/{name}", **flash)


async def bulk_action(request: Request) -> Response:
    """Apply one task action to every selected id; report how many succeeded and failed."""
    name = request.path_params["queue"]
    form = await read_form(request)
    if isinstance(form, Response):
        return form
    action = (form.get("action") or [""])[0]
    if action not in TASK_ACTIONS:
        return message(request, f"unknown action {action!r}", 400)
    inspector = dashboard_of(request).conveyor.inspect
    done = failed = 0
    why = ""  # the first failure's reason: the flash says why, not only how many
    for task_id in form.get("ids", []):
        try:
            TASK_ACTIONS[action](inspector, task_id)
            done += 1
        except BrokerError:
            raise  # the broker is down: the dashboard's 503 page (web/app.py)
        except (ConveyorError, ValueError, TypeError) as exc:
            failed += 1
            why = why or str(exc)
    flash: dict[str, Any] = {"done": action, "n": done, "failed": failed}
    if why:
        flash["why"] = why[:200]
    return back_to(request, form, f"{base_path(request)}/queues/{name}", **flash)
