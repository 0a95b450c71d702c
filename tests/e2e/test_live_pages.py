"""Pages that never go stale, end to end: a job page, the dashboard and the jobs list stay open in a real
browser while a real job is submitted, admitted, run on kubesim and ends; each shows every change without a
reload (a mark set in each page at the start is still there at the end).

The job holds itself running until the test lets it go: it connects to a socket the test listens on (kubesim
pods share the machine's loopback) and ends when the test sends a byte, so nothing depends on timing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from django.db import connections
from playwright.sync_api import expect

from jobs.models import Job
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.e2e.conftest import login
from tests.factories import make_tenant, member
from tests.jobs.engine import HOLD, gate_env, python_spec

pytestmark = pytest.mark.slow

T = TypeVar("T")

MARK = "window.__mark = 'still here'"


@pytest.fixture
def gate() -> Iterator[socket.socket]:
    """A listening socket on the loopback that the job connects to; closed at the end."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(120)
        yield server


def _in_thread(work: Callable[[], T]) -> T:
    """Runs ORM work in a thread of its own: the push after commit needs a thread without Playwright's loop."""

    def run() -> T:
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def _open(context: Any, path: str, ready: str) -> Any:
    page = context.new_page()
    page.goto(path)
    expect(page.locator(ready)).to_have_count(1, timeout=15_000)  # subscribed: no frame is missed
    page.evaluate(MARK)
    return page


def _meter(page: Any, label: str) -> Any:
    return page.locator(".meter", has=page.locator(f".meter-head span:text-is('{label}')")).locator(".num")


@pytest.mark.kubesim_only  # the learner connects to this host's loopback (GATE_PORT): kubesim pods share it
def test_job_page_dashboard_and_list_follow_a_job_from_submit_to_its_end_without_reload(
    live_page: Any, gate: socket.socket, engine: KubeSim
) -> None:
    tenant = make_tenant("vision", cpu_millis=4000, memory_mib=8192)
    alice = member(tenant, username="alice")
    context = live_page.context
    login(live_page, "alice")
    dashboard = _open(context, "/", "#dashboard-live[data-live=live]")
    jobs_list = _open(context, "/jobs/", "#jobs-list[data-live=live]")
    expect(_meter(dashboard, "Queued jobs")).to_have_text("0 / 10")
    capacity = dashboard.locator("#capacity tbody")
    capacity_before = capacity.inner_text()

    port = gate.getsockname()[1]
    spec = python_spec("held", HOLD, cpu="1", memory="256Mi", env=gate_env(engine, port))
    job: Job = _in_thread(lambda: job_submit(tenant=tenant, user=alice, document=spec))
    job_page = _open(context, f"/jobs/{job.pk}/", "#job-status[data-live=live]")

    # The new job appears in the list and on the dashboard, and is admitted, launched and held running.
    row = jobs_list.locator(f'tr[data-job-id="{job.pk}"]')
    expect(row).to_have_count(1, timeout=15_000)
    expect(dashboard.locator(f'tr[data-job-id="{job.pk}"]')).to_have_count(1, timeout=15_000)
    conn, _ = gate.accept()
    with conn:
        expect(job_page.locator("#job-status .badge")).to_have_text("Running", timeout=30_000)
        expect(job_page.locator("#job-info [data-attempt]")).to_contain_text("1 (retries", timeout=10_000)
        expect(job_page.locator("#job-resources [data-nodes]")).not_to_have_text("—", timeout=10_000)
        expect(job_page.locator("#job-actions [data-action=cancel]")).to_be_visible()
        expect(_meter(dashboard, "Running jobs")).to_have_text("1 / 4", timeout=10_000)
        expect(_meter(dashboard, "CPU")).to_have_text("1 / 4 cores")
        expect(capacity).not_to_have_text(capacity_before)  # the job's pod holds room on its node
        expect(row.locator("[data-status]")).to_have_text("Running", timeout=10_000)
        conn.sendall(b"x")

    # It ends: every page shows the end without a reload.
    expect(job_page.locator("#job-status .badge")).to_have_text("Succeeded", timeout=30_000)
    expect(job_page.locator("#job-actions [data-action=cancel]")).to_have_count(0, timeout=10_000)
    expect(job_page.locator("#job-actions [data-action=retry]")).to_be_visible()
    expect(job_page.locator("#job-times dd").nth(3)).not_to_have_text("—")
    expect(row.locator("[data-status]")).to_have_text("Succeeded", timeout=10_000)
    expect(dashboard.locator(f'tr[data-job-id="{job.pk}"]')).to_have_count(0, timeout=10_000)
    expect(_meter(dashboard, "Running jobs")).to_have_text("0 / 4", timeout=10_000)
    expect(capacity).to_have_text(capacity_before, timeout=10_000)
    for page in (dashboard, jobs_list, job_page):
        assert page.evaluate("window.__mark") == "still here"
