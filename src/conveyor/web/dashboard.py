"""What every dashboard page shares: the ``Dashboard`` (found at ``request.app.state.dashboard``),
``render`` with what every page needs, ``message``, and the constants of the pages.

``app.py`` builds the Starlette application from the page modules, and the pages import this, not
``app.py`` nor each other, so the imports of ``web/`` form no circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from conveyor.metrics import Metrics
from conveyor.model import TaskState
from conveyor.web.jobs import Jobs
from conveyor.web.security import Csrf

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["DONE", "PAGE_SIZES", "STATES", "Dashboard", "base_path", "dashboard_of", "message", "render"]


@dataclass
class Dashboard:
    """Everything the handlers share (found at ``request.app.state.dashboard``)."""

    conveyor: Conveyor
    templates: Jinja2Templates
    read_only: bool = False
    csrf: Csrf = field(default_factory=Csrf)
    metrics: Metrics | None = None
    jobs: Jobs = field(default_factory=Jobs)


STATES = [state.value for state in TaskState]
PAGE_SIZES = (20, 50, 100, 200)

#: Messages shown after an action (the redirect carries only these codes and numbers).
DONE = {
    "run-now": "queued to run now",
    "archive": "archived",
    "delete": "deleted",
    "cancel": "cancelled",
    "pause": "queue paused",
    "resume": "queue resumed",
    "purge": "deleted",
    "quiet": "worker told to stop claiming (it obeys at its next beat)",
    "stop": "worker told to shut down (it obeys at its next beat)",
}


def dashboard_of(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


def base_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> Response:
    """Render a page with what every page needs: base path, CSRF token, read-only flag, flash message."""
    dash = dashboard_of(request)
    done, count, failed = (
        request.query_params.get("done"),
        request.query_params.get("n"),
        request.query_params.get("failed"),
    )
    flash = None
    if done in DONE:
        flash = DONE[done] + (f": {int(count)} task(s)" if count and count.isdigit() else "")
        if failed and failed.isdigit() and int(failed):
            why = request.query_params.get("why", "")[:200]
            flash += f"; {int(failed)} could not be changed" + (f" ({why})" if why else "")
    full = {
        "base": base_path(request),
        "csrf": dash.csrf.token(request),
        "read_only": dash.read_only,
        "flash": flash,
        "now": dash.conveyor.now(),
        "states": STATES,
        **context,
    }
    response = dash.templates.TemplateResponse(request, template, full, status_code=status_code)
    dash.csrf.set_cookie(request, response)
    return response


def message(request: Request, text: str, status_code: int, back: str | None = None) -> Response:
    return render(request, "message.html", {"message": text, "back": back}, status_code)


async def broker_down(request: Request, exc: Exception) -> Response:
    """Any page whose broker call failed (``BrokerError``: unreachable, busy past its timeout): 503
    with what the broker said, as JSON under ``/api/`` (the overview's poll shows it), never a 500."""
    text = f"the broker did not answer: {exc}"
    if request.url.path.startswith(f"{base_path(request)}/api/"):
        return JSONResponse({"error": text}, status_code=503)
    return message(request, text, 503)
