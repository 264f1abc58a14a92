"""The dashboard in a real browser: Playwright driving Debian's Chromium against uvicorn.

Loads the overview (live charts and tables drawn by our JS under the strict CSP), opens a task, retries
an archived task, pauses a queue, and keeps a screenshot (``artifacts/dashboard.png``, and
with ``CONVEYOR_UPDATE_DOCS_SCREENSHOT=1`` also ``docs/img/dashboard.png`` for the README). Every page is
then opened at a desktop width and at a phone's (390 px): nothing may widen the page (wide tables scroll
inside their card) and the header's search box stays on screen; screenshots of each go to
``artifacts/layout/``. A second test drives the 24 h chart range, the Metrics page, the cross-queue
failed view with a filtered "retry all matching" over more than a screen of tasks, search, and a real
worker told to quiet and then stop from the workers page (screenshots in ``artifacts/``).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, Fixed, PermanentError, TaskState
from conveyor.model import WorkerInfo
from conveyor.testing import poll_until
from conveyor.testing.redis_server import free_port
from conveyor.web import create_app

CHROMIUM = "/usr/bin/chromium"
PHONE, DESKTOP = 390, 1360
ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# `make test` sets CONVEYOR_REQUIRE_BROWSER=1 once it has installed Chromium: then a missing one fails the test.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM) and not os.environ.get("CONVEYOR_REQUIRE_BROWSER"),
        reason="needs Debian's chromium (make test installs it)",
    ),
]


def _past_hour(app: Conveyor) -> None:
    """An hour of earlier work on the same broker, settled minute by minute through a FakeClock, so the
    charts have a history to show as the page opens."""
    clock = FakeClock(app.now() - 3600)
    past = Conveyor(broker=app.broker, clock=clock)

    rng = random.Random(7)

    @past.task(queue="thumbnails", max_retries=2, backoff=Fixed(90))
    def thumbnail(n: int) -> None:
        if rng.random() < 0.05:
            raise OSError("storage node busy")

    worker = past.worker(queues=["thumbnails"])
    for minute in range(58):
        for n in range(rng.randint(6, 12 + minute // 3)):
            thumbnail.enqueue(n)
        worker.run_until_idle()
        clock.advance(60)


def _populate(app: Conveyor) -> dict[str, str]:
    """A realistic mix: completed and failed work, waiting tasks, a paused-able queue, a live worker."""

    @app.task(queue="emails")
    def send_welcome(user_id: int, template: str = "welcome") -> str:
        return f"sent {template} to user {user_id}"

    @app.task(queue="reports", max_retries=0)
    def build_report(month: str) -> None:
        raise PermanentError(f"no data for {month}: upstream warehouse returned 503")

    @app.task
    def resize_image(path: str, width: int) -> dict[str, int]:
        return {"width": width, "height": width * 3 // 4}

    _past_hour(app)
    for i in range(14):
        send_welcome.enqueue(1000 + i)
    for i in range(9):
        resize_image.enqueue(f"/uploads/photo-{i}.jpg", width=640)
    failed = build_report.enqueue("2024-05")
    build_report.enqueue("2024-06")
    worker = app.worker(queues=["emails", "default", "reports"])
    worker.run_until_idle()
    for i in range(6):
        send_welcome.enqueue(2000 + i)
    resize_image.with_options(delay=3600).enqueue("/uploads/later.png", width=1280)
    app.broker.register_worker(
        WorkerInfo("web-1.4821", "web-1", 4821, ("emails", "default", "reports"), 8, app.now() - 3600, app.now()),
        app.now(),
        ttl=300,
    )
    return {"failed": failed.id}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Conveyor, dict[str, str]]]:
    """The dashboard on a free 127.0.0.1 port (uvicorn in a thread, stopped at teardown)."""
    import uvicorn

    app = Conveyor(f"sqlite:///{tmp_path / 'browser.db'}")
    web = create_app(app)
    ids = _populate(app)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(web, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "uvicorn stopped before it started"
        return server.started

    poll_until(started, timeout=15, message="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}", app, ids
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        app.close()


def test_dashboard_in_chromium(served: tuple[str, Conveyor, dict[str, str]]) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, app, ids = served
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            # Overview: our script ran (CSP allows it) and drew the live tables and charts.
            page.goto(url + "/")
            page.wait_for_selector("body[data-refreshed]", timeout=10_000)
            expect(page.locator('#queues tr[data-queue="emails"]')).to_be_visible()
            expect(page.locator("#chart-throughput polyline")).to_have_count(1)
            # The charts show what was settled before the page opened (the broker's per-minute counts).
            expect(page.locator("#rate-now")).to_have_text(re.compile(r"^(?!0\.0/s$)[0-9.]+/s$"))
            expect(page.locator("#fail-now")).to_have_text(re.compile(r"^[1-9][0-9.]*%$"))
            expect(page.locator("#workers")).to_contain_text("web-1")

            # A refresh that fails (the broker down) says so over the numbers it leaves, then goes.
            expect(page.locator("#stale")).to_be_hidden()
            down = {"error": "the broker did not answer: Redis is unreachable"}
            page.route("**/api/overview*", lambda route: route.fulfill(status=503, json=down))
            expect(page.locator("#stale")).to_contain_text("Not refreshed since", timeout=10_000)
            expect(page.locator("#stale")).to_contain_text("Redis is unreachable")
            page.unroute("**/api/overview*")
            expect(page.locator("#stale")).to_be_hidden(timeout=10_000)

            # Open the failed task from its queue.
            page.click('#queues tr[data-queue="reports"] td.state-archived a')
            page.click(f'a[href="/tasks/{ids["failed"]}"]')
            expect(page.locator("h1")).to_contain_text(ids["failed"])
            expect(page.locator("body")).to_contain_text("upstream warehouse returned 503")
            expect(page.locator("ol.timeline")).to_contain_text("archived")

            # Retry it.
            page.click('button:has-text("Retry")')
            expect(page.locator(".flash")).to_contain_text("queued to run now")
            expect(page.locator("h1 .badge")).to_have_text("pending")
            assert app.get(ids["failed"]).state == TaskState.PENDING

            # Pause a queue from the overview (the live table keeps a working form).
            page.goto(url + "/")
            page.wait_for_selector("body[data-refreshed]")
            page.click('#queues tr[data-queue="emails"] button:has-text("Pause")')
            expect(page.locator(".flash")).to_contain_text("queue paused")
            expect(page.locator('#queues tr[data-queue="emails"] .badge.paused')).to_be_visible()
            assert [q.settings.paused for q in app.inspect.queues() if q.name == "emails"] == [True]

            page.goto(url + "/")
            page.wait_for_selector("body[data-refreshed]")
            shot = ROOT / "artifacts" / "dashboard.png"
            shot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000  # a real rendering, not a blank page
            if os.environ.get("CONVEYOR_UPDATE_DOCS_SCREENSHOT"):  # refresh the README's picture on request
                shutil.copyfile(shot, ROOT / "docs" / "img" / "dashboard.png")
        finally:
            browser.close()
    refused = "Failed to load resource: the server responded with a status of 503 (Service Unavailable)"
    assert [e for e in errors if e != refused] == []  # no CSP violation, no script error (the 503s were ours)


def _imports(app: Conveyor) -> None:
    """70 failed imports: 60 of one error (more than a screen's page of 50) and 10 of another."""

    @app.task(queue="imports", max_retries=0)
    def import_row(row: int) -> None:
        raise PermanentError("bad row: missing column 'email'" if row < 60 else "disk full")

    for row in range(70):
        import_row.enqueue(row)
    app.worker(queues=["imports"]).run_until_idle()


def test_failed_view_search_and_worker_commands_in_chromium(served: tuple[str, Conveyor, dict[str, str]]) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, app, _ids = served
    _imports(app)
    shots = ROOT / "artifacts"
    shots.mkdir(exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": DESKTOP, "height": 900})
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: dialog.accept())  # the confirmations

            # Charts: the day range redraws with its time axis.
            page.goto(url + "/")
            page.wait_for_selector("body[data-refreshed]", timeout=10_000)
            expect(page.locator("#axis-throughput .tick").first).to_have_text(re.compile(r"^\d\d:\d0$"))
            page.click('.ranges a[data-range="24h"]')
            page.wait_for_selector("body[data-refreshed]", timeout=10_000)
            expect(page.locator(".charts")).to_have_attribute("data-range", "24h")
            expect(page.locator("#chart-throughput polyline")).to_have_count(1)
            page.screenshot(path=str(shots / "overview-24h.png"), full_page=True)

            # Metrics: a readable page behind the nav's link.
            page.click('header nav a:has-text("Metrics")')
            expect(page.locator("#m-conveyor_queue_tasks")).to_contain_text("Tasks per queue and state")
            page.screenshot(path=str(shots / "metrics.png"), full_page=True)

            # The failed view across queues, filtered by error text, then "retry all matching".
            page.click('header nav a:has-text("Failed")')
            expect(page.locator("#summary")).to_contain_text("72 matching")
            page.fill('.filters input[name="error"]', "bad row")
            page.click('.filters button:has-text("Filter")')
            expect(page.locator("#summary")).to_contain_text("60 matching")
            expect(page.locator("tr[data-task]")).to_have_count(50)  # one screen of a larger selection
            expect(page.locator("table.tasks")).to_contain_text("permanent")
            page.screenshot(path=str(shots / "failed.png"), full_page=True)
            page.click('button:has-text("Retry all matching")')
            expect(page.locator('#job[data-state="done"]')).to_have_text("queued to run now: 60 task(s)")
            imports = app.inspect.queue("imports").counts
            assert (imports["pending"], imports["archived"]) == (60, 10)

            # Search by argument text and by error text.
            page.fill("header .search input", "disk full")
            page.press("header .search input", "Enter")
            expect(page.locator("#summary")).to_contain_text("10 task(s)")
            page.fill("header .search input", "2024-06")
            page.press("header .search input", "Enter")
            expect(page.locator("tr[data-task]")).to_have_count(1)
            expect(page.locator("table.tasks")).to_contain_text("build_report")
            page.screenshot(path=str(shots / "search.png"), full_page=True)

            # A real worker, told to quiet and then to stop from the workers page.
            worker = app.worker(queues=["maintenance"], registry_interval=0.1, poll_interval=0.05)
            thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
            thread.start()
            poll_until(
                lambda: (
                    worker.runtime is not None and worker.runtime.worker_id in {w.id for w in app.inspect.workers()}
                ),
                timeout=10,
                message="the worker to register",
            )
            runtime = worker.runtime
            assert runtime is not None
            try:
                page.click('header nav a:has-text("Workers")')
                row = page.locator(f'article[data-worker="{runtime.worker_id}"]')
                row.locator('button:has-text("Quiet")').click()
                expect(page.locator(".flash")).to_contain_text("stop claiming")
                expect(row.locator(".badge.cmd-quiet")).to_be_visible()
                poll_until(lambda: runtime.registry.obeyed == "quiet", message="the worker to obey quiet")
                page.screenshot(path=str(shots / "workers.png"), full_page=True)
                row.locator('button:has-text("Stop")').click()
                expect(page.locator(".flash")).to_contain_text("shut down")
                assert runtime.stopped.wait(5), "the worker did not obey stop"
            finally:
                worker.stop()
                thread.join(timeout=15)
            page.reload()
            expect(page.locator(f'article[data-worker="{runtime.worker_id}"]')).to_have_count(0)
        finally:
            browser.close()
    assert errors == []


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_every_page_fits_the_viewport(served: tuple[str, Conveyor, dict[str, str]], width: int) -> None:
    from playwright.sync_api import sync_playwright

    url, _app, ids = served
    pages = {
        "overview": "/",
        "queue": "/queues/reports?state=archived",
        "queue-completed": "/queues/emails?state=completed",
        "task": f"/tasks/{ids['failed']}",
        "notice": "/search?id=no-such-task",
        "failed": "/failed",
        "search": "/search?q=report",
        "workers": "/workers",
        "metrics": "/metrics/view",
    }
    shots = ROOT / "artifacts" / "layout"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 844})
            for name, path in pages.items():
                page.goto(url + path)
                if name == "overview":
                    page.wait_for_selector("body[data-refreshed]", timeout=10_000)
                page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
                scroll_width, inner_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
                assert scroll_width <= inner_width, f"{name} at {width} px is {scroll_width} px wide"
                search = page.locator("header .search input").bounding_box()
                find = page.locator("header .search button").bounding_box()
                assert search is not None and find is not None
                assert search["x"] >= 0 and find["x"] + find["width"] <= inner_width, f"{name}: search off screen"
                assert search["width"] >= 120, f"{name}: search box squeezed to {search['width']} px"
                for table in page.locator(".scroll").all():  # a wide table scrolls inside its card
                    box = table.bounding_box()
                    assert box is not None and box["x"] + box["width"] <= inner_width, f"{name}: table overflows"
        finally:
            browser.close()
