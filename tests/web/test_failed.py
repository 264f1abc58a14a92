"""The cross-queue failed view, "retry / delete all matching" over whole selections, and text search."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from conveyor import Conveyor, FakeClock, Fixed, PermanentError, TaskState
from conveyor.selection import PAGE, BulkResult, TaskFilter, apply_all
from conveyor.testing import poll_until
from conveyor.web import failed as failed_module

if TYPE_CHECKING:
    from starlette.testclient import TestClient

Csrf = Callable[..., str]


def _failures(app: Conveyor, clock: FakeClock) -> dict[str, list[str]]:
    """Archived tasks in two queues (one long ago), and one task waiting for a retry."""

    @app.task(queue="reports", max_retries=0)
    def build_report(month: str) -> None:
        raise PermanentError(f"no data for {month}: warehouse returned 503")

    @app.task(queue="mail", max_retries=0)
    def send_mail(to: str, template: str = "welcome") -> None:
        clock.advance(1.5)  # an execution that takes a while: shown as its duration
        raise OSError("smtp timeout")

    @app.task(queue="mail", max_retries=3, backoff=Fixed(600))
    def flaky() -> None:
        raise RuntimeError("flaky upstream")

    old = [build_report.enqueue("2023-01").id]
    app.worker(queues=["reports"]).run_until_idle()
    clock.advance(3 * 3600)
    reports = [build_report.enqueue(f"2024-{m:02d}").id for m in (5, 6)]
    mails = [send_mail.enqueue("ann@example.com").id, send_mail.enqueue("bob@example.com", template="reset").id]
    retrying = [flaky.enqueue().id]
    app.worker(queues=["reports", "mail"]).run_until_idle()
    return {"old": old, "reports": reports, "mails": mails, "retrying": retrying}


def _ids(page: str) -> list[str]:
    return re.findall(r'<tr data-task="([^"]+)"', page)


def test_failed_view_lists_every_queue_with_filters_and_columns(
    client: TestClient, app: Conveyor, clock: FakeClock
) -> None:
    ids = _failures(app, clock)
    page = client.get("/failed")
    assert page.status_code == 200
    shown = _ids(page.text)
    assert sorted(shown) == sorted(ids["old"] + ids["reports"] + ids["mails"] + ids["retrying"])
    assert shown[-1] == ids["old"][0]  # newest failure first
    assert "6 matching" in page.text
    # The columns: args, state with the archive reason, duration, last error.
    assert "&#34;bob@example.com&#34;, template=&#34;reset&#34;" in page.text
    assert '<span class="reason">permanent</span>' in page.text and "1.5s" in page.text
    assert "smtp timeout" in page.text

    def only(**params: str) -> list[str]:
        return sorted(_ids(client.get("/failed", params=params).text))

    assert only(queue="mail") == sorted(ids["mails"] + ids["retrying"])
    assert only(kind="retry") == ids["retrying"]
    assert only(kind="archived", queue="mail") == sorted(ids["mails"])
    assert only(name="REPORT") == sorted(ids["old"] + ids["reports"])
    assert only(reason="permanent") == sorted(ids["old"] + ids["reports"])
    assert only(error="smtp") == sorted(ids["mails"])
    assert only(since="1h") == sorted(ids["reports"] + ids["mails"] + ids["retrying"])
    assert only(since="24h", name="build") == sorted(ids["old"] + ids["reports"])
    assert client.get("/failed", params={"reason": "bogus"}).status_code == 400
    assert client.get("/failed", params={"since": "1y"}).status_code == 400


def test_queue_lists_show_args_duration_and_reason(client: TestClient, app: Conveyor, clock: FakeClock) -> None:
    _failures(app, clock)
    page = client.get("/queues/mail?state=archived").text
    assert "<th>args</th>" in page and '<th class="num">duration</th>' in page and "<th>reason</th>" in page
    assert "&#34;ann@example.com&#34;" in page and "1.5s" in page and '<td class="reason">failed</td>' in page


def _many_archived(app: Conveyor, count: int, queue: str, error: str) -> None:
    @app.task(name=f"fail_{queue}", queue=queue, max_retries=0)
    def fail(n: int) -> None:
        raise PermanentError(f"{error} #{n}")

    for n in range(count):
        fail.enqueue(n)
    app.worker(queues=[queue]).run_until_idle()


def test_retry_all_matching_covers_every_page_of_the_selection(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    matching = PAGE + 60  # more than one page of the broker's listing, and many pages on screen
    app.configure_queue("imports", partitions=3)  # on Redis, the listing's pages go over 3 slots
    _many_archived(app, matching, "imports", "bad row")
    _many_archived(app, 30, "exports", "disk full")
    page = client.get("/failed", params={"error": "bad row"})
    assert f"{matching} matching" in page.text and len(_ids(page.text)) == 50  # one screen shows 50
    token = csrf(client, "/failed?error=bad+row")
    done = client.post(
        "/failed/bulk",
        data={"csrf": token, "next": "/failed?error=bad+row", "action": "retry", "error": "bad row"},
    )
    assert done.status_code == 303
    location = done.headers["location"]
    job = re.fullmatch(r"/failed\?error=bad\+row&job=([0-9a-f]+)", location)
    assert job, location
    progress = _finished(client, job.group(1))
    assert (progress["matched"], progress["done"], progress["failed"]) == (matching, matching, 0)
    assert progress["batches"] == 1 and progress["text"] == f"queued to run now: {matching} task(s)"
    counts = {q.name: q.counts for q in app.inspect.queues()}
    assert counts["imports"]["pending"] == matching and counts["imports"]["archived"] == 0
    assert counts["exports"]["archived"] == 30 and counts["exports"]["pending"] == 0  # not matching: untouched
    page = client.get(location).text
    assert 'data-state="done"' in page and f"queued to run now: {matching} task(s)" in page


def _finished(client: TestClient, job_id: str) -> dict[str, Any]:
    """Poll a bulk job's progress until it ends (deadline 30 s)."""
    seen: list[dict[str, Any]] = []

    def ended() -> dict[str, Any] | None:
        seen.append(client.get(f"/api/jobs/{job_id}").json())
        return None if seen[-1]["state"] == "running" else seen[-1]

    progress = poll_until(ended, timeout=30, message=lambda: f"the job to end (still running: {seen[-1]})")
    assert progress["state"] == "done", progress
    return progress


def test_delete_all_matching_deletes_only_the_selection(client: TestClient, app: Conveyor, csrf: Csrf) -> None:
    _many_archived(app, 12, "imports", "bad row")
    _many_archived(app, 5, "exports", "disk full")
    done = client.post("/failed/bulk", data={"csrf": csrf(client, "/failed"), "action": "delete", "queue": "exports"})
    assert done.status_code == 303
    job_id = done.headers["location"].rpartition("job=")[2]
    assert _finished(client, job_id)["text"] == "deleted: 5 task(s)"
    counts = {q.name: q.counts for q in app.inspect.queues()}
    assert counts["exports"]["archived"] == 0 and counts["imports"]["archived"] == 12
    assert client.get("/api/jobs/nope").status_code == 404


def test_bulk_needs_csrf_and_a_writable_dashboard(
    client: TestClient, make_client: Callable[..., TestClient], app: Conveyor, csrf: Csrf
) -> None:
    _many_archived(app, 3, "imports", "bad row")
    assert client.post("/failed/bulk", data={"action": "delete"}).status_code == 403
    assert client.post("/failed/bulk", data={"csrf": csrf(client), "action": "explode"}).status_code == 400
    read_only = make_client(read_only=True)
    assert "Delete all matching" not in read_only.get("/failed").text
    assert read_only.post("/failed/bulk", data={"csrf": csrf(read_only), "action": "delete"}).status_code == 403
    assert app.inspect.queue("imports").counts["archived"] == 3


def test_apply_all_reports_batches_and_tasks_changed_meanwhile(app: Conveyor) -> None:
    _many_archived(app, 7, "imports", "bad row")
    seen: list[tuple[int, int]] = []
    flt = TaskFilter(queues=("imports",))

    def progress(result: BulkResult) -> None:
        seen.append((result.batches, result.done + result.failed))

    result = apply_all(app.inspect, flt, "retry", batch=3, progress=progress)
    assert (result.matched, result.done, result.failed, result.batches) == (7, 7, 0, 3)
    assert seen == [(0, 0), (1, 3), (2, 6), (3, 7)]
    # A task that changed state between the scan and its turn is counted, not acted on twice.
    _many_archived(app, 4, "exports", "disk full")
    victim = app.inspect.list("exports", "archived", limit=4)[-1].id

    def race(result: BulkResult) -> None:
        if result.batches == 1:
            app.inspect.delete(victim)

    raced = apply_all(app.inspect, TaskFilter(queues=("exports",)), "delete", batch=2, progress=race)
    assert (raced.matched, raced.done, raced.failed) == (4, 3, 1) and victim in raced.why
    with pytest.raises(ValueError, match="unknown bulk action"):
        apply_all(app.inspect, flt, "explode")
    capped = apply_all(app.inspect, TaskFilter(states=(TaskState.PENDING,)), "delete", max_tasks=5)
    assert (capped.matched, capped.cut_short) == (5, True)


def test_search_by_name_argument_and_error_text(client: TestClient, app: Conveyor, clock: FakeClock) -> None:
    ids = _failures(app, clock)
    pending = app.enqueue("index_document", args=("/docs/handbook.pdf",), queue="search").id

    def hits(q: str) -> list[str]:
        page = client.get("/search", params={"q": q})
        assert page.status_code == 200, page.text
        return sorted(_ids(page.text))

    assert hits("send_MAIL") == sorted(ids["mails"])  # name, case-insensitive
    assert hits("bob@example") == [ids["mails"][1]]  # argument text
    assert hits("handbook") == [pending]  # any state, not only failures
    assert hits("warehouse returned") == sorted(ids["old"] + ids["reports"])  # error text
    assert hits("no such thing") == []
    exact = client.get("/search", params={"q": pending})
    assert exact.status_code == 303 and exact.headers["location"] == f"/tasks/{pending}"


def test_search_matches_arguments_as_the_pages_show_them(client: TestClient, app: Conveyor) -> None:
    """As JSON (``"retry 1"``, ``null``, ``true``), which a user copies from a page; it matched
    Python's repr (``'retry 1'``, ``None``) instead."""
    task_id = app.enqueue("job", args=["retry 1", None, True], kwargs={"mode": "fast"}).id
    for shown in ('"retry 1"', "null", "true", 'mode="fast"'):
        page = client.get("/search", params={"q": shown})
        assert page.status_code == 200 and _ids(page.text) == [task_id], shown
    assert _ids(client.get("/search", params={"q": "None"}).text) == []


def test_a_search_cut_short_says_so(
    client: TestClient, app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failures(app, clock)
    full = client.get("/search", params={"q": "example"}).text
    assert "cut short" not in full and "all 6 tasks looked at" in full
    monkeypatch.setattr(failed_module, "SEARCH_SCAN", 2)
    cut = client.get("/search", params={"q": "example"}).text
    assert "search cut short after looking at 2 tasks" in cut


def test_a_jobs_progress_text_follows_its_batches() -> None:
    from conveyor.web.jobs import Job

    job = Job("j1", "retry")
    assert job.text == "retry: finding the matching tasks…"
    job.result = BulkResult(matched=1200, done=499, failed=1, batches=1)
    assert job.text == "retry: 500 of 1200 matching task(s) so far…"
    job.state, job.result = "done", BulkResult(matched=1200, done=1199, failed=1, batches=3, why="task x is active")
    assert job.text == "queued to run now: 1199 task(s); 1 could not be changed (task x is active)"
    job.state, job.error = "failed", "BrokerUnavailable: down"
    assert job.text == "queued to run now: stopped by an error after 1199 task(s): BrokerUnavailable: down"
