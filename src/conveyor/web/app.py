"""``create_app``: the dashboard as a Starlette application over one ``Conveyor`` app."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from conveyor.errors import BrokerError
from conveyor.metrics import Metrics
from conveyor.web import actions, failed, jobs, views, workers
from conveyor.web.dashboard import Dashboard, broker_down
from conveyor.web.format import age, call_args, duration, iso, pretty_json, relative
from conveyor.web.security import SecurityMiddleware

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["create_app"]

HERE = Path(__file__).parent


def create_app(
    conveyor_app: Conveyor,
    *,
    token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    read_only: bool = False,
) -> Starlette:
    """The dashboard for ``conveyor_app``'s broker.

    ``token``: require ``Authorization: Bearer <token>`` (a browser may open ``/?token=<token>`` once;
    it is then kept in an HttpOnly cookie). ``basic_auth``: ``(user, password)`` for HTTP basic auth.
    Either one protects every page but ``/healthz``. ``read_only``: show everything, refuse every action.

    The overview's charts read the broker's per-minute counters (``Inspector.history``): they show
    the last hour as soon as the page opens.
    """
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"], default=True),
    )
    env.filters.update(
        iso=iso, age=age, relative=relative, pretty_json=pretty_json, call_args=call_args, duration=duration
    )
    templates = Jinja2Templates(env=env)
    dashboard = Dashboard(conveyor_app, templates, read_only=read_only, metrics=Metrics(conveyor_app))

    routes = [
        Route("/", views.overview, name="overview"),
        Route("/api/overview", views.overview_json, name="overview_json"),
        Route("/queues/{queue}", views.queue, name="queue"),
        Route("/tasks/{task_id}", views.task, name="task"),
        Route("/search", failed.search, name="search"),
        Route("/failed", failed.failed, name="failed"),
        Route("/workers", workers.workers, name="workers"),
        Route("/workers/{worker_id}/{command}", workers.worker_command, methods=["POST"], name="worker_command"),
        Route("/api/jobs/{job_id}", jobs.job_json, name="job_json"),
        Route("/failed/bulk", failed.failed_bulk, methods=["POST"], name="failed_bulk"),
        Route("/metrics", views.metrics, name="metrics"),
        Route("/metrics/view", views.metrics_page, name="metrics_page"),
        Route("/healthz", views.healthz, name="healthz"),
        Route("/tasks/{task_id}/{action}", actions.task_action, methods=["POST"], name="task_action"),
        Route("/queues/{queue}/bulk", actions.bulk_action, methods=["POST"], name="bulk_action"),
        Route("/queues/{queue}/{action}", actions.queue_action, methods=["POST"], name="queue_action"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityMiddleware, token=token, basic_auth=basic_auth)],
        exception_handlers={BrokerError: broker_down},
    )
    app.state.dashboard = dashboard
    return app
