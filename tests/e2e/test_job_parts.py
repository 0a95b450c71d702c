"""The job page's live parts in a real browser: htmx fetches them after each state change and swaps them in
out of band; a burst of changes costs one request in flight and one follow-up, which shows the last state.
The page runs under production's script rules (no inline script, no eval) and breaks none."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections, transaction
from playwright.sync_api import APIResponse, Route, expect

from jobs.models import Job
from jobs.services.control import job_halt
from jobs.services.lifecycle import transition
from tests.e2e.conftest import login
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.slow

# Production's SECURE_CSP for scripts and connections (portal/settings/production.py), put on the job page.
CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'"
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
"""


def _move(job: Job, to: str) -> None:
    """Moves the job as the engine would, from a thread of its own: the push after commit needs a thread
    without Playwright's event loop."""

    def move() -> None:
        try:
            with transaction.atomic():
                transition(Job.objects.select_for_update().get(pk=job.pk), to, reason="Test")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(move).result()


def _with_csp(route: Route) -> None:
    response = route.fetch()
    route.fulfill(response=response, headers=response.headers | {"content-security-policy": CSP})


def test_a_burst_of_state_changes_refreshes_the_parts_once_more_with_the_last_state(page: Any) -> None:
    alice = member(make_tenant("vision"), "member", username="alice")
    job = make_job(alice.memberships.get().tenant, alice)
    held: list[
        tuple[Route, APIResponse]
    ] = []  # parts requests answered by the server, not yet by the browser
    errors: list[str] = []  # htmx reports a part without its container (htmx:oobErrorNoTarget) here
    page.on(
        "console", lambda message: errors.append(message.text) if message.text.startswith("htmx:") else None
    )
    login(page, "alice")
    page.add_init_script(RECORD_VIOLATIONS)
    page.route(re.compile(r"/jobs/[a-z0-9]+/$"), _with_csp)
    page.route(re.compile(r"/parts/$"), lambda route: held.append((route, route.fetch())))
    page.goto(f"/jobs/{job.pk}/")
    badge = page.locator("#job-status .badge")
    timeline = page.locator("#events li.event .transition")

    _move(job, "starting")
    expect(badge).to_have_text("Starting", timeout=10_000)
    _until(page, lambda: len(held) == 1)
    _move(job, "running")
    expect(badge).to_have_text("Running", timeout=10_000)
    _move(job, "cancelling")
    expect(badge).to_have_text("Cancelling", timeout=10_000)
    page.wait_for_timeout(500)
    assert len(held) == 1  # the first request is still open; the changes since wait behind it

    route, response = held[0]
    route.fulfill(response=response)
    expect(timeline.last).to_have_text("queued → starting")  # the first answer, as the server rendered it
    _until(page, lambda: len(held) == 2)  # one follow-up for both changes since
    route, response = held[1]
    route.fulfill(response=response)
    expect(timeline.last).to_have_text("running → cancelling")
    page.wait_for_timeout(500)
    assert len(held) == 2
    assert page.evaluate("window.__violations") == [] and errors == []


def _until(page: Any, check: Callable[[], bool]) -> None:
    """Waits (letting the browser's events through) until `check` holds."""
    for _ in range(200):
        if check():
            return
        page.wait_for_timeout(50)
    raise AssertionError("timed out")


def test_a_job_halted_while_its_page_is_open_offers_resume_without_a_reload(page: Any) -> None:
    alice = member(make_tenant("vision"), "member", username="alice")
    job = make_job(alice.memberships.get().tenant, alice)
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    actions = page.locator("#job-actions")
    expect(actions.locator("[data-action=halt]")).to_be_visible()

    def halt() -> None:
        try:
            job_halt(job=Job.objects.get(pk=job.pk), user=alice)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(halt).result()
    expect(page.locator("#job-status .badge")).to_have_text("Halted", timeout=10_000)
    expect(actions.locator("[data-action=resume]")).to_be_visible(timeout=10_000)
    expect(actions.locator("[data-action=halt]")).to_have_count(0)
    expect(actions.locator("[data-action=cancel]")).to_be_visible()


def test_the_jobs_list_shows_the_borrowed_chip_when_a_job_is_admitted_on_borrowed_quota(page: Any) -> None:
    alice = member(make_tenant("vision"), "member", username="alice")
    job = make_job(alice.memberships.get().tenant, alice)
    login(page, "alice")
    page.goto("/jobs/")
    expect(page.locator("[data-tenant][data-live=live]")).to_have_count(1)  # subscribed: no frame is missed
    row = page.locator(f'tr[data-job-id="{job.pk}"]')
    expect(row.locator("[data-status]")).to_have_text("Queued")
    expect(row.locator("[data-borrowed] .chip-borrowed")).to_have_count(0)

    Job.objects.filter(pk=job.pk).update(borrowed=True)  # as job_admit sets it, just before the transition
    _move(job, "starting")
    expect(row.locator("[data-status]")).to_have_text("Starting", timeout=10_000)
    expect(row.locator("[data-borrowed] .chip-borrowed")).to_have_text("borrowed", timeout=10_000)
