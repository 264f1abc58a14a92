"""The workers page (``/workers``): each live worker with the tasks it runs, and the operator's
``quiet`` / ``stop`` commands (``conveyor.commands``), which a worker obeys at its next registry beat."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor.commands import COMMANDS
from conveyor.errors import BrokerError, ConveyorError
from conveyor.model import TaskInfo
from conveyor.web.actions import back_to, read_form
from conveyor.web.dashboard import base_path, dashboard_of, message, render

__all__ = ["worker_command", "workers"]

#: Running tasks looked up per worker (the rest are listed by id).
DETAILED = 20


async def workers(request: Request) -> Response:
    dash = dashboard_of(request)
    inspector = dash.conveyor.inspect
    now = dash.conveyor.now()
    rows: list[dict[str, Any]] = []
    for w in inspector.workers():
        running: list[TaskInfo | str] = []
        for n, task_id in enumerate(w.running):
            try:
                running.append(inspector.get(task_id) if n < DETAILED else task_id)
            except BrokerError:
                raise  # the broker is down: the dashboard's 503 page (web/app.py)
            except ConveyorError:
                running.append(task_id)  # settled since the beat: shown by id
        command = inspector.worker_command(w.id)
        rows.append({"info": w, "running": running, "command": command, "age": max(0.0, now - w.last_seen)})
    return render(request, "workers.html", {"workers": rows, "commands": COMMANDS})


async def worker_command(request: Request) -> Response:
    """POST ``/workers/{worker_id}/{command}``: send ``quiet`` or ``stop``."""
    worker_id, command = request.path_params["worker_id"], request.path_params["command"]
    back = f"{base_path(request)}/workers"
    if command not in COMMANDS:
        return message(request, f"unknown command {command!r}", 404, back=back)
    form = await read_form(request)
    if isinstance(form, Response):
        return form
    try:
        dashboard_of(request).conveyor.inspect.command_worker(worker_id, command)
    except BrokerError:
        raise  # the broker is down: the dashboard's 503 page (web/app.py)
    except (ConveyorError, ValueError) as exc:
        return message(request, f"{command}: {exc}", 409, back=back)
    return back_to(request, form, back, done=command)
