"""The CLI's list and status say when a job runs on borrowed quota."""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Console

from trainyard.output import job_panel, jobs_table

JOB: dict[str, Any] = {
    "id": "j1", "name": "train", "tenant": "vision", "owner": "alice", "status": "running", "reason": "",
    "message": "", "priority": 0, "attempt": 1, "max_retries": 2, "queue_position": None,
    "resources": {"learners": 1, "gpus": 4, "cpu_millis": 1000, "memory_mib": 1024}, "borrowed": True,
    "source": "trainyard", "created_at": "2026-01-01T00:00:00Z", "admitted_at": None, "started_at": None,
    "finished_at": None,
}  # fmt: skip


def render(*tables: Any) -> str:
    out = StringIO()
    console = Console(file=out, width=200)
    for table in tables:
        console.print(table)
    return out.getvalue()


def test_list_and_status_mark_a_borrowed_job_and_only_it() -> None:
    assert "running (borrowed)" in render(jobs_table([JOB]))
    assert "borrowed (admitted above the tenant's nominal quota)" in render(*job_panel(JOB))
    plain = {**JOB, "borrowed": False}
    assert "borrowed" not in render(jobs_table([plain]))
    assert "borrowed" not in render(*job_panel(plain))
