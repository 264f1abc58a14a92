"""Dashboard pages and feeds: overview, queue, task, search, JSON, /metrics, /healthz, mounting."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from conveyor import ConfigurationError, Conveyor, FakeClock
from conveyor.model import WorkerInfo
from conveyor.web import create_app

if TYPE_CHECKING:
    from starlette.testclient import TestClient

Csrf = Callable[..., str]


def test_overview_lists_queues_counts_and_paused_flag(client: TestClient, app: Conveyor) -> None:
    app.enqueue("a", queue="mail")
    app.enqueue("b", queue="reports", delay=60)
    app.inspect.pause("reports")
    page = client.get("/")
    assert page.status_code == 200
    assert 'data-queue="mail"' in page.text and 'data-queue="reports"' in page.text
    assert "paused" in page.text
    data = client.get("/api/overview").json()
    queues = {q["name"]: q for q in data["queues"]}
    assert queues["mail"]["counts"]["pending"] == 1 and queues["reports"]["paused"] is True
    assert set(data["series"]) == {"range", "bucket", "t", "processed", "failed", "current"}


def test_overview_shows_workers_with_heartbeats_and_running_tasks(client: TestClient, app: Conveyor) -> None:
    worker = WorkerInfo("w-1", "host-a", 42, ("default",), 4, app.now() - 60, app.now() - 3, ("task-9",), 10, 1)
    app.broker.register_worker(worker, app.now(), ttl=60)
    page = client.get("/")
    assert "host-a" in page.text and "0s ago" in page.text and 'href="/tasks/task-9"' in page.text
    worker_json = client.get("/api/overview").json()["workers"][0]
    assert worker_json["running"] == ["task-9"] and worker_json["heartbeat_age"] == 0


def test_charts_show_the_last_hour_settled_before_the_dashboard_started(
    make_client: Callable[..., TestClient], app: Conveyor, clock: FakeClock
) -> None:
    @app.task
    def ok() -> None:
        pass

    @app.task(max_retries=0)
    def bad() -> None:
        raise ValueError("no")

    ok.enqueue()
    bad.enqueue()
    app.worker().run_until_idle()
    clock.advance(120)
    ok.enqueue()
    app.worker().run_until_idle()
    series = make_client().get("/api/overview").json()["series"]  # a dashboard started only now
    # Finished minutes only: the one under way would dip (it has had only part of its seconds).
    assert series["bucket"] == 60 and len(series["t"]) == 59
    assert series["t"][-1] == 60 * (clock.now() // 60) - 60 and series["t"][-1] - series["t"][0] == 58 * 60
    assert (series["processed"][-2:], series["failed"][-2:]) == ([2, 0], [1, 0])
    assert sum(series["processed"]) == 2
    # The headline figures cover the last finished minute and the one under way.
    current = series["current"]
    assert (current["processed"], current["failed"]) == (1, 0)
    assert current["seconds"] == 60 + clock.now() % 60


def test_the_day_range_draws_ten_minute_buckets_aligned_and_finished(
    client: TestClient, app: Conveyor, clock: FakeClock
) -> None:
    @app.task
    def ok() -> None:
        pass

    for _ in range(3):
        ok.enqueue()
        app.worker().run_until_idle()
        clock.advance(7 * 60)  # settles fall in different 10-minute buckets
    series = client.get("/api/overview?range=24h").json()["series"]
    assert series["range"] == "24h" and series["bucket"] == 600
    assert all(t % 600 == 0 for t in series["t"])
    now = clock.now()
    assert series["t"][-1] + 600 <= now < series["t"][-1] + 1200  # the bucket under way is left out
    assert series["t"][0] >= now - 86400  # so is one that began before the window
    assert 143 <= len(series["t"]) <= 144
    done_before = sum(1 for t in (now - 21 * 60, now - 14 * 60, now - 7 * 60) if t < series["t"][-1] + 600)
    assert sum(series["processed"]) == done_before
    # The page shows the selector with the chosen range current; an unknown range falls back to 1 h.
    page = client.get("/?range=24h")
    assert 'class="tab current" href="/?range=24h"' in page.text and "last 24 hours" in page.text
    assert client.get("/api/overview?range=7d").json()["series"]["range"] == "1h"


class WithoutHistory:
    """A broker without the optional ``KeepsHistory`` capability (everything else delegated)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "history":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_broker_without_history_gets_empty_charts_not_an_error(
    make_client: Callable[..., TestClient], app: Conveyor, clock: FakeClock
) -> None:
    plain = Conveyor(broker=WithoutHistory(app.broker), clock=clock)
    with pytest.raises(ConfigurationError, match="keeps no per-minute history"):
        plain.inspect.history()
    client = make_client(create_app(plain))
    assert client.get("/").status_code == 200
    assert client.get("/api/overview").json()["series"] is None


def test_queue_page_lists_tasks_by_state_with_paging(client: TestClient, app: Conveyor) -> None:
    for i in range(25):
        app.enqueue("job", task_id=f"job-{i:02d}")
    first = client.get("/queues/default?state=pending&limit=20")
    assert first.status_code == 200
    assert "job-00" in first.text and "job-19" in first.text and "job-20" not in first.text
    assert "offset=20" in first.text  # a link to the next page
    second = client.get("/queues/default?state=pending&limit=20&offset=20")
    assert "job-20" in second.text and "job-24" in second.text and "job-19" not in second.text
    assert "job-00" not in client.get("/queues/default?state=archived").text


def test_queue_page_shows_a_partitioned_queues_partitions(client: TestClient, app: Conveyor) -> None:
    app.configure_queue("hot", partitions=4)
    assert "4 partitions" in client.get("/queues/hot").text
    assert "partitions" not in client.get("/queues/default").text


def test_queue_page_rejects_an_unknown_state(client: TestClient) -> None:
    assert client.get("/queues/default?state=done").status_code == 400


def test_task_page_shows_the_retry_limit_a_worker_recorded_and_unknown_before(
    client: TestClient, app: Conveyor, clock: FakeClock
) -> None:
    worker_app = Conveyor(broker=app.broker, clock=clock)  # the handler lives only in the worker

    @worker_app.task(name="sync_crm", max_retries=1)
    def sync_crm() -> None:
        raise ConnectionError("crm down")

    task_id = app.enqueue("sync_crm").id
    assert "retries left unknown" in client.get(f"/tasks/{task_id}").text
    worker_app.worker().process_next()
    page = client.get(f"/tasks/{task_id}").text
    assert "retries left 0 of 1" in page and "unknown" not in page


def test_task_page_shows_args_result_errors_and_timeline(client: TestClient, app: Conveyor) -> None:
    @app.task(max_retries=0)
    def explode(n: int, *, label: str) -> None:
        raise ValueError(f"boom {n}")

    @app.task
    def answer() -> dict[str, int]:
        return {"answer": 42}

    failed = explode.enqueue(7, label="seven")
    done = answer.enqueue()
    app.worker().run_until_idle()
    page = client.get(f"/tasks/{failed.id}")
    assert page.status_code == 200
    for text in ("explode", "seven", "ValueError: boom 7", "Error history", "Timeline", "enqueued", "archived"):
        assert text in page.text
    assert "&#34;answer&#34;: 42" in client.get(f"/tasks/{done.id}").text


def test_task_page_shows_a_unique_tasks_key(client: TestClient, app: Conveyor) -> None:
    unique = app.enqueue("sync", ["a-1"], unique_key="account-a-1", unique_for=60)
    plain = app.enqueue("sync", ["a-2"])
    assert "<dt>unique key</dt><dd><code>account-a-1</code>" in client.get(f"/tasks/{unique.id}").text
    assert "unique key" not in client.get(f"/tasks/{plain.id}").text


def test_task_page_shows_the_latest_failures_traceback_escaped(client: TestClient, app: Conveyor) -> None:
    @app.task(max_retries=0)
    def explode_markup() -> None:
        raise ValueError("<b>boom</b>")

    @app.task
    def fine() -> None:
        pass

    failed = explode_markup.enqueue()
    done = fine.enqueue()
    app.worker().run_until_idle()
    page = client.get(f"/tasks/{failed.id}").text
    assert "Traceback of the latest failure" in page and "in explode_markup" in page
    assert "ValueError: &lt;b&gt;boom&lt;/b&gt;" in page and "<b>boom</b>" not in page
    assert "Traceback of the latest failure" not in client.get(f"/tasks/{done.id}").text


def test_unknown_task_is_404(client: TestClient) -> None:
    assert client.get("/tasks/nope").status_code == 404


def test_search_by_id_goes_to_the_task(client: TestClient, app: Conveyor) -> None:
    app.enqueue("job", task_id="find-me")
    found = client.get("/search", params={"id": "find-me"})
    assert found.status_code == 303 and found.headers["location"] == "/tasks/find-me"
    missing = client.get("/search", params={"id": "nope"})
    assert missing.status_code == 404 and "no task with id" in missing.text


def test_metrics_endpoint_serves_queue_gauges(client: TestClient, app: Conveyor) -> None:
    app.enqueue("job")
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'conveyor_queue_tasks{queue="default",state="pending"} 1.0' in metrics.text


def test_metrics_link_opens_a_readable_page(client: TestClient, app: Conveyor) -> None:
    app.enqueue("job", queue="mail")
    page = client.get("/")
    assert 'href="/metrics/view">Metrics</a>' in page.text
    readable = client.get("/metrics/view")
    assert readable.status_code == 200 and readable.headers["content-type"].startswith("text/html")
    text = readable.text
    assert "conveyor_queue_tasks" in text and "Tasks per queue and state" in text
    assert "queue=&#34;mail&#34;, state=&#34;pending&#34;" in text  # labels, escaped, with the value
    assert "_bucket" not in text and "_created" not in text  # histograms as count / sum / mean
    assert '<th class="num">mean</th>' in text
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")  # the raw text stays


def test_metrics_endpoint_counts_the_host_apps_enqueues(client: TestClient, app: Conveyor) -> None:
    app.enqueue("job")
    app.enqueue_many("job", [((1,), {}), ((2,), {})])
    assert 'conveyor_tasks_enqueued_total{queue="default",task="job"} 3.0' in client.get("/metrics").text


def test_healthz_answers_when_the_broker_does(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"ok": True}


def test_static_assets_are_served(client: TestClient) -> None:
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/style.css").status_code == 200


def test_mounted_under_a_prefix_links_and_actions_stay_inside(
    make_client: Callable[..., TestClient], app: Conveyor, csrf: Csrf
) -> None:
    host = Starlette(routes=[Mount("/admin/queues", create_app(app))])
    client = make_client(host)
    app.enqueue("job", task_id="m-1")
    page = client.get("/admin/queues/")
    assert page.status_code == 200
    assert 'href="/admin/queues/static/style.css"' in page.text and 'href="/admin/queues/queues/default"' in page.text
    token = csrf(client, "/admin/queues/")
    done = client.post("/admin/queues/tasks/m-1/archive", data={"csrf": token, "next": "/admin/queues/tasks/m-1"})
    assert done.status_code == 303 and done.headers["location"].startswith("/admin/queues/tasks/m-1?")
    assert app.get("m-1").state == "archived"


def test_queue_page_of_an_unknown_queue_is_404(client: TestClient, app: Conveyor) -> None:
    app.enqueue("job")
    response = client.get("/queues/nosuchqueue")
    assert response.status_code == 404
    assert "queue not found: &#39;nosuchqueue&#39;" in response.text


def test_a_page_offset_past_any_queue_is_refused_in_one_line(client: TestClient, app: Conveyor) -> None:
    """SQLite answered a 500 (an OverflowError binding it), Redis its script's own error text."""
    app.enqueue("job")
    page = client.get("/queues/default", params={"offset": str(2**63)})
    assert page.status_code == 400 and "offset must be &lt;= 1,000,000,000,000" in page.text, page.text[:300]
