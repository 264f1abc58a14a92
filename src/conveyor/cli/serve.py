"""Long-running commands: ``worker``, ``dashboard``, and the ``demo``."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from dataclasses import replace
from typing import Any

import click

from conveyor.cli.output import redact
from conveyor.cli.state import CliState, pass_state

__all__ = ["MIN_TOKEN", "dashboard", "demo", "worker"]

#: The shortest dashboard token accepted: a short one is guessed by trying.
MIN_TOKEN = 16


@click.command()
@click.argument("app_path", metavar="MODULE:APP")
@click.option("--queues", "-Q", metavar="SPEC", help="Queues to serve, with optional weights: 'emails=3,default=1'.")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Tasks run at once per process (default 10).")
@click.option(
    "--processes",
    "-p",
    type=click.IntRange(min=1),
    help="Run N worker processes under a supervisor (default: one worker, in this process).",
)
@click.option("--strict", is_flag=True, default=None, help="Visit queues in the order given, ignoring weights.")
@click.option("--metrics-port", type=click.IntRange(min=1, max=65535), help="Serve Prometheus metrics on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
@click.option(
    "--summary-interval",
    type=click.FloatRange(min=0),
    help="Seconds between the INFO lines summing up what the worker did (default 10; 0: none).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    help="Seconds running tasks may finish after SIGTERM before they are given back (default 20).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    help="Tasks claimed ahead of free slots (default: what the slots finish in 10 ms at the recent rate).",
)
@click.option("--lease", type=click.FloatRange(min=0, min_open=True), help="Seconds a claim holds a task (default 10).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="info: start/stop, a periodic summary, each retry, failure and lease loss; debug: every task too.",
)
@pass_state
def worker(
    state: CliState,
    app_path: str,
    queues: str | None,
    concurrency: int | None,
    processes: int | None,
    strict: bool | None,
    metrics_port: int | None,
    metrics_host: str,
    summary_interval: float | None,
    grace: float | None,
    prefetch: int | None,
    lease: float | None,
    log_level: str,
) -> None:
    """Run a worker for the app at MODULE:APP (its tasks registered). Settings not given here come from
    CONVEYOR_WORKER_* variables, then the defaults. The broker is the app's own unless --url (or
    CONVEYOR_URL) is given: then that URL wins."""
    from conveyor.app import Conveyor
    from conveyor.errors import ConfigurationError
    from conveyor.worker.config import WorkerConfig, parse_queues, unknown_env
    from conveyor.worker.entry import run_worker
    from conveyor.worker.loader import URL_ENV, load_app

    overrides: dict[str, Any] = {}
    if queues is not None:  # given empty (an unset variable, say): refused, not "the default"
        try:
            overrides["queues"], overrides["weights"] = parse_queues(queues)
        except (TypeError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="'--queues' / '-Q'") from None
    logging.getLogger("conveyor").setLevel(log_level.upper())
    if state.url:  # --url or CONVEYOR_URL wins over the app's own broker, here and in child processes
        os.environ[URL_ENV] = state.url
        ctx = click.get_current_context()
        ctx.call_on_close(lambda: os.environ.pop(URL_ENV, None))  # an embedding process goes on unchanged
    app = load_app(app_path)
    if not isinstance(app, Conveyor):  # the worker's loader knows an app by what it uses of one
        raise ConfigurationError(f"{app_path!r} is a {type(app).__name__}, not a Conveyor app")
    given = {
        "concurrency": concurrency,
        "processes": processes,
        "strict": strict,
        "summary_interval": summary_interval,
        "shutdown_grace": grace,
        "prefetch": prefetch,
        "lease_for": lease,
    }
    overrides.update({name: value for name, value in given.items() if value is not None})
    config = WorkerConfig.from_env(**overrides)
    for message in unknown_env():
        click.echo(f"warning: {message}", err=True)
    broker = redact(app.url) if app.url else repr(app.broker)
    click.echo(f"worker {app_path} on {broker}, queues {','.join(config.queues)}", err=True)
    stop_metrics = None
    if metrics_port is not None:
        if config.processes >= 1:  # children count (by reference: objects cannot cross), the supervisor sums
            from conveyor.metrics_multiprocess import MIDDLEWARE_REF, serve_children

            stop_metrics = serve_children(app, metrics_port, metrics_host)
            config = replace(config, middleware_refs=(*config.middleware_refs, MIDDLEWARE_REF))
        else:
            from conveyor.metrics import Metrics

            metrics = Metrics(app)
            stop_metrics = metrics.serve(metrics_port, metrics_host)
            config = replace(config, middleware=(*config.middleware, metrics.middleware()))
        click.echo(f"metrics on http://{_netloc(metrics_host, metrics_port)}/metrics", err=True)
    try:
        code = run_worker(app_path if config.processes >= 1 else app, config)
    finally:
        if stop_metrics is not None:
            stop_metrics()
    raise SystemExit(code)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8181, show_default=True)
@click.option(
    "--token", envvar="CONVEYOR_DASHBOARD_TOKEN", help="Require this bearer token ($CONVEYOR_DASHBOARD_TOKEN)."
)
@click.option(
    "--basic-auth",
    envvar="CONVEYOR_DASHBOARD_BASIC_AUTH",
    metavar="USER:PASSWORD",
    help="Require HTTP basic auth ($CONVEYOR_DASHBOARD_BASIC_AUTH).",
)
@click.option("--read-only", is_flag=True, help="Show everything, allow no action.")
@pass_state
def dashboard(
    state: CliState, host: str, port: int, token: str | None, basic_auth: str | None, read_only: bool
) -> None:
    """Serve the web dashboard (127.0.0.1 only, unless a token or basic auth is set)."""
    import uvicorn

    from conveyor.web import create_app

    if token is not None and len(token) < MIN_TOKEN:
        raise click.BadParameter(
            f"must be at least {MIN_TOKEN} characters; make one with:"
            " python -c 'import secrets; print(secrets.token_urlsafe())'",
            param_hint="--token",
        )
    credentials: tuple[str, str] | None = None
    if basic_auth:
        user, sep, password = basic_auth.partition(":")
        if not sep or not user or not password:
            raise click.BadParameter("expected USER:PASSWORD", param_hint="--basic-auth")
        credentials = (user, password)
    if not _is_loopback(host) and not token and credentials is None:
        raise click.UsageError(f"binding {host} exposes the dashboard: set --token or --basic-auth (or their env vars)")
    web = create_app(state.conveyor(create=True), token=token, basic_auth=credentials, read_only=read_only)
    sock = _bind(host, port)  # here, so an address in use is one line naming it, not uvicorn's log
    bound = sock.getsockname()[1]
    click.echo(f"dashboard for {redact(state.resolved_url)} on http://{_netloc(host, bound)}/", err=True)
    config = uvicorn.Config(web, log_level=os.environ.get("CONVEYOR_LOG_LEVEL", "warning").lower())
    uvicorn.Server(config).run(sockets=[sock])


def _netloc(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (``[::1]:8181``) as URLs need."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise click.ClickException(f"cannot serve the dashboard on {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise click.ClickException(
            f"cannot serve the dashboard on {_netloc(host, port)}: {(exc.strerror or str(exc)).lower()}"
        ) from None
    sock.set_inheritable(True)
    return sock


@click.command()
def demo() -> None:
    """A guided tour: enqueue, run, retry, inspect (no setup needed)."""
    try:
        from conveyor.demo import main as demo_main
    except ImportError as exc:
        raise click.ClickException(f"the demo is not available: {exc}") from None
    result: Any = demo_main()
    if isinstance(result, int) and result:
        raise SystemExit(result)
