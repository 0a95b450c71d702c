"""The idle-GPU flag on an open job page in a real browser: the check flags the job (a `parts` frame on its
socket) and the warning appears without a reload; busy GPUs clear it the same way."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job, TelemetrySample
from jobs.services.idlegpu import job_idle_gpu_check
from jobs.services.lifecycle import transition
from tests.e2e.conftest import login
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.slow


def _in_thread(work: Callable[[], Any]) -> Any:
    """Runs a service from a thread of its own: the push after commit needs a thread without Playwright's
    event loop."""

    def run() -> Any:
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def _look(job: Job, seconds_ago: float, util: float) -> None:
    TelemetrySample.objects.create(
        job=job, attempt=job.attempt, learner=0, ts=timezone.now() - timedelta(seconds=seconds_ago),
        cpu_millis_used=100, cpu_millis_limit=1000, memory_mib_used=100, memory_mib_limit=1024, gpu_util=util,
    )  # fmt: skip


@override_settings(IDLE_GPU_THRESHOLD=0.05, IDLE_GPU_WINDOW_SECONDS=60.0, TELEMETRY_INTERVAL_SECONDS=10.0)
def test_the_idle_gpu_flag_comes_and_goes_on_an_open_job_page(page: Any) -> None:
    alice = member(make_tenant("vision"), "member", username="alice")
    job = make_job(alice.memberships.get().tenant, alice, gpus=1)
    for to in ("starting", "running"):
        with transaction.atomic():
            job = transition(Job.objects.select_for_update().get(pk=job.pk), to, reason="Test")
    for seconds_ago in range(90, -1, -10):
        _look(job, seconds_ago, 0.01)
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-status[data-live=live]")).to_have_count(1)  # subscribed: no frame is missed
    flag = page.locator("#job-gpu [data-idle-gpu]")
    expect(flag).to_have_count(0)

    check = _in_thread(lambda: job_idle_gpu_check(job_id=job.pk))
    assert check.action == "flagged"
    expect(flag).to_be_visible(timeout=10_000)
    expect(flag).to_contain_text("GPUs idle")
    expect(flag).to_contain_text("Halt it to give its GPUs back")

    _look(job, -1, 0.9)  # a busy reading, just after now
    check = _in_thread(lambda: job_idle_gpu_check(job_id=job.pk, now=timezone.now() + timedelta(seconds=2)))
    assert check.action == "cleared"
    expect(flag).to_have_count(0, timeout=10_000)
