"""The dashboard in a real browser: log in, submit from the editor, follow the job, read its log and charts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent, LogLine, MetricSample
from tests.e2e.conftest import login, screenshot
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.slow

BAD_SPEC = "name: broken\ncommand: [python]\nresources:\n  gpus: lots\n"


@pytest.fixture
def alice() -> Any:
    team = make_tenant("vision")
    return member(team, "member", username="alice")


def test_submit_from_the_editor_then_find_it_in_the_list_and_open_it(page: Any, alice: Any) -> None:
    login(page, "alice")
    page.click("nav >> text=Submit")
    editor = page.locator("#id_spec")
    assert "name: demo-mlp" in editor.input_value()
    page.select_option("#template-select", "two-learners")
    assert "name: ddp-two-learners" in editor.input_value()
    page.select_option("#template-select", "pytorch")
    page.click("button[name=submit]")
    page.wait_for_url(re.compile(r"/jobs/[a-z0-9]+/$"))
    job = Job.objects.get()
    assert job.name == "demo-mlp" and job.status == "queued"
    assert page.locator("#job-status .badge").inner_text() == "Queued"
    assert "Submitted" in page.locator("#events").inner_text()
    page.locator("#log").get_by_text("No log lines yet.").wait_for()

    page.click("nav >> text=Jobs")
    row = page.locator(f"tr[data-job-id='{job.pk}']")
    assert "demo-mlp" in row.inner_text() and "Queued" in row.inner_text()
    row.locator("a.job-link").click()
    page.wait_for_url(f"**/jobs/{job.pk}/")
    assert "submitted by alice" in page.locator("#events").inner_text()
    screenshot(page, "job-queued.png")


def test_a_bad_spec_shows_the_field_errors_beside_the_editor(page: Any, alice: Any) -> None:
    login(page, "alice")
    page.goto("/jobs/new/")
    page.fill("#id_spec", BAD_SPEC)
    page.click("button[name=submit]")
    errors = page.locator("#spec-errors")
    errors.wait_for()
    assert "image" in errors.inner_text() and "resources.gpus" in errors.inner_text()
    assert page.locator("#id_spec").input_value().strip() == BAD_SPEC.strip()
    assert not Job.objects.exists()


def test_dry_run_stores_nothing(page: Any, alice: Any) -> None:
    login(page, "alice")
    page.goto("/jobs/new/")
    page.click("button[name=dry_run]")
    page.locator("#dry-run").wait_for()
    assert not Job.objects.exists()


def test_job_page_renders_log_colours_search_and_metric_charts(page: Any, alice: Any) -> None:
    team = alice.memberships.get().tenant
    job = make_job(team, alice, status="running", learners=2, attempt=1, started_at=timezone.now())
    JobEvent.objects.create(
        job=job, kind="transition", from_status="starting", to_status="running", reason="Running"
    )
    now = timezone.now()
    LogLine.objects.bulk_create(
        [
            LogLine(
                job=job, learner=0, attempt=1, seq=1, ts=now, text="\x1b[31mred alert\x1b[0m <b>not bold</b>"
            ),
            *[
                LogLine(
                    job=job, learner=learner, attempt=1, seq=s, ts=now, text=f"step {s} of learner {learner}"
                )
                for learner in (0, 1)
                for s in range(2, 40)
            ],
            LogLine(
                job=job,
                learner=0,
                attempt=1,
                seq=40,
                ts=now,
                text="see \x1b]8;;https://evil.example/steal\x1b\\the docs\x1b]8;;\x1b\\ now",
            ),
        ]
    )
    MetricSample.objects.bulk_create(
        [
            MetricSample(job=job, learner=0, attempt=1, name=name, step=s, value=v / (s + 1), log_seq=s + 2)
            for s in range(30)
            for name, v in (("loss", 3.0), ("samples_per_sec", 900.0 * (s + 1)))
        ]
    )
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    log = page.locator("#log")
    log.get_by_text("step 39 of learner 1").wait_for()
    red = log.locator("span[style*='color']", has_text="red alert")
    assert red.count() == 1
    assert "<b>not bold</b>" in log.inner_text()  # escaped, shown as text
    assert log.locator("b").count() == 0
    assert log.locator(".ln").count() == 1 + 2 * 38 + 1
    log.get_by_text("see the docs [https://evil.example/steal] now").wait_for()
    assert log.locator("a").count() == 0, "an OSC-8 hyperlink is shown as text, never as a link"

    page.click(".tab[data-learner='1']")
    assert log.locator(".ln:visible").count() == 38
    page.click(".tab[data-learner='all']")
    page.fill("#log-search", "step 7 ")
    page.wait_for_function("document.querySelectorAll('#log .ln:not([hidden])').length === 2")
    assert log.locator("mark").count() == 2
    page.fill("#log-search", "")

    page.locator("#charts .chart canvas").first.wait_for()
    assert page.locator("#charts .chart h3").all_inner_texts() == ["loss", "samples_per_sec"]
    assert page.locator("a[data-action=clone]").count() == 1
    assert page.locator("button[data-action=cancel]").count() == 1
    screenshot(page, "job-page.png")


def test_dashboard_shows_usage_and_my_jobs(page: Any, alice: Any) -> None:
    team = alice.memberships.get().tenant
    make_job(team, alice, status="running", learners=2, gpus=1, cpu_millis=2000, memory_mib=4096)
    make_job(team, alice)
    login(page, "alice")
    assert page.locator(".meter").count() == 7  # GPUs, CPU, memory, running, queued, claim storage, claims
    assert page.locator("tr[data-job-id]").count() == 2
    assert page.locator("[data-testid=cluster-down]").count() == 1  # no cluster configured in this server
    screenshot(page, "dashboard.png")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "dashboard-mobile.png")
