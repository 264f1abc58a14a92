"""Bulk actions that run in the background of the dashboard's process, with progress a page polls.

"Retry / delete all matching" may cover many thousands of tasks: the POST starts a job on a thread and
returns at once; the failed view shows the job's progress (``/api/jobs/{id}``, polled by the page's
script, or read again on reload) as ``apply_all`` reports each batch. A dashboard keeps its last
:data:`KEEP` jobs in memory only (a restart forgets them; what they did is in the broker).
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from conveyor.selection import BulkResult

__all__ = ["KEEP", "Job", "Jobs", "job_json"]

#: Jobs a dashboard remembers.
KEEP = 50
VERBS = {"retry": "queued to run now", "delete": "deleted"}


@dataclass
class Job:
    """One bulk action: ``state`` running / done / failed, the latest ``result`` (copied at each batch)."""

    id: str
    action: str
    state: str = "running"
    result: BulkResult = field(default_factory=BulkResult)
    error: str = ""

    @property
    def text(self) -> str:
        r = self.result
        verb = VERBS.get(self.action, self.action)
        if self.state == "failed":
            return f"{verb}: stopped by an error after {r.done} task(s): {self.error}"
        if self.state == "running":
            if not r.matched and not r.batches:
                return f"{self.action}: finding the matching tasks…"
            return f"{self.action}: {r.done + r.failed} of {r.matched} matching task(s) so far…"
        text = f"{verb}: {r.done} task(s)"
        if r.failed:
            text += f"; {r.failed} could not be changed" + (f" ({r.why[:200]})" if r.why else "")
        return text + ("; stopped at the limit, more match" if r.cut_short else "")


class Jobs:
    """The dashboard's recent jobs (thread-safe)."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, action: str, work: Callable[[Callable[[BulkResult], None]], BulkResult]) -> Job:
        """Run ``work(progress)`` on a thread; ``progress`` is what it calls after each batch."""
        job = Job(uuid.uuid4().hex[:16], action)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP:
                self._jobs.popitem(last=False)

        def progress(result: BulkResult) -> None:
            job.result = replace(result)

        def run() -> None:
            try:
                job.result = replace(work(progress))
                job.state = "done"
            except Exception as exc:  # shown on the page: the broker may have gone away mid-way
                job.error = f"{type(exc).__name__}: {exc}"[:300]
                job.state = "failed"

        threading.Thread(target=run, name=f"conveyor-bulk-{job.id}", daemon=True).start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)


def _as_dict(job: Job) -> dict[str, Any]:
    r = job.result
    return {
        "id": job.id,
        "action": job.action,
        "state": job.state,
        "matched": r.matched,
        "done": r.done,
        "failed": r.failed,
        "batches": r.batches,
        "text": job.text,
    }


async def job_json(request: Request) -> Response:
    """``/api/jobs/{job_id}``: a job's progress (404 when unknown or forgotten)."""
    jobs: Jobs = request.app.state.dashboard.jobs
    job = jobs.get(request.path_params["job_id"])
    if job is None:
        return JSONResponse({"error": "no such job"}, status_code=404)
    return JSONResponse(_as_dict(job))
