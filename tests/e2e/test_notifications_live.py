"""Notifications end to end: in a real browser a user creates a webhook subscription on the Notifications
page and copies the signing secret it shows once; a real job runs on kubesim (worker and watcher running)
and succeeds; a local HTTP server started by the test receives the webhook, whose signature checks out with
the secret the page showed; the subscription's page then shows the delivery in its log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import expect

from jobs.models import Job
from jobs.notifications.models import Notification
from jobs.notifications.signing import verify
from jobs.services import job_submit
from tests.e2e.conftest import login, screenshot
from tests.factories import make_tenant, member
from tests.notifications.receiver import receiver

pytestmark = pytest.mark.slow

SPEC = {
    "name": "notify-me",
    "image": "python:3.11",
    "command": ["python", "-u", "-c", "print('training done')"],
    "resources": {"cpu": "200m", "memory": "128Mi"},
}


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _submit(tenant: Any, user: Any) -> Job:
    """Submits from a thread of its own (the push after commit needs a thread without Playwright's loop)."""

    def submit() -> Job:
        try:
            return job_submit(tenant=tenant, user=user, document=SPEC)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(submit).result()


def test_a_webhook_made_in_the_page_receives_the_signed_success_of_a_real_job(live_page: Any) -> None:
    page = live_page
    tenant = make_tenant("vision")
    alice = member(tenant, "member", username="alice")
    with receiver() as hook:
        login(page, "alice")
        page.click("header >> text=Notifications")
        page.fill("#id_name", "ci hook")
        screenshot(page, "notifications-list.png")
        page.select_option("#id_channel", "webhook")
        page.fill("#id_url", hook.url)
        page.uncheck("input[name=events][value=failed]")
        page.check("input[name=events][value=succeeded]")
        page.click("#subscription-form button[type=submit]")
        screenshot(page, "notifications-created.png")
        secret = page.locator("#secret [data-secret]").inner_text().strip()
        assert secret.startswith("whsec_")

        job = _submit(tenant, alice)
        (got,) = hook.wait_for(1, timeout=90)
        job.refresh_from_db()
        assert job.status == "succeeded"

        timestamp = got.headers["x-trainyard-timestamp"]
        assert verify(secret, timestamp, got.body, got.headers["x-trainyard-signature"])
        assert abs(time.time() - int(timestamp)) < 300
        body = json.loads(got.body)
        assert body["event"] == "succeeded" and got.headers["x-trainyard-event"] == "succeeded"
        assert body["job"]["id"] == job.pk and body["job"]["state"] == "succeeded"
        assert body["job"]["tenant"] == "vision" and body["job"]["url"].endswith(f"/jobs/{job.pk}/")

        # The worker records the attempt once the receiver has answered.
        _until(lambda: Notification.objects.filter(state="delivered").exists(), "the delivery to be recorded")
        page.click("header >> text=Notifications")
        page.click("#subscriptions >> text=ci hook")
        expect(page.locator("#secret")).to_have_count(0)  # shown once
        row = page.locator("#deliveries tr[data-state=delivered]")
        expect(row).to_have_count(1)
        expect(row.locator("[data-answer]")).to_have_text("200")
        screenshot(page, "notifications-delivered.png")
    assert hook.requests == [got]  # once, and nothing after the receiver stopped
