"""The job page live, end to end: a browser, the daphne server, the Celery worker and the watcher on kubesim.

Submitted from the editor, a real PyTorch job (the example template) is admitted, launched as a pod whose
command runs as a local process, and followed; the page shows its status, timeline, learners, log lines and
`loss` chart as they come over the WebSocket, without a reload. A second job is cancelled from its page.
Both log in as `demo`, the login `make up` creates (`seed_demo`).
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from playwright.sync_api import expect

from jobs.models import Job
from tests.e2e.conftest import RECORD_PLOTS, login, screenshot

pytestmark = pytest.mark.slow

BAD_SPEC = "name: broken\ncommand: [python]\nresources:\n  gpus: lots\n"
# The example's training loop, slowed so the chart grows over a few seconds (100 steps of ~40 ms).
STEP = "opt.zero_grad(); loss.backward(); opt.step()"
SLOW_STEP = STEP + "; time.sleep(0.04)"
SLEEPER = json.dumps(
    {
        "name": "sleeper",
        "image": "python:3.11",
        "command": ["python", "-u", "-c", "import time\nprint('up')\ntime.sleep(300)"],
        "resources": {"cpu": "200m", "memory": "128Mi"},
    }
)
LOSS_POINTS = """() => {
  const plots = (window.__plots || []).filter((p) => p.root.parentElement.querySelector("h3").textContent === "loss");
  return plots.length ? plots[plots.length - 1].data[0].length : 0;
}"""
TORCH = 45_000  # ms: importing torch in the pod takes 5-15 s on this machine kind
JOB_URL = re.compile(r"/jobs/[a-z0-9]+/$")
HISTORY = re.compile(r"/api/v1/jobs/[^/]+/logs/")


@pytest.fixture
def demo(live_page: Any) -> None:
    """The logins `make up` creates (`seed_demo`: demo/demo in tenant demo), in the live test database."""
    with override_settings(LOCAL_SETUP=True):
        call_command("seed_demo", stdout=io.StringIO())


def _timeline(page: Any) -> list[str]:
    """The statuses the page's timeline shows, in order."""
    items = page.locator("#events li.event .transition").all_inner_texts()
    return [text.split("→")[-1].strip() for text in items]


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _status(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def test_a_submitted_pytorch_job_goes_live_on_its_page(live_page: Any, demo: None) -> None:
    page = live_page
    page.add_init_script(RECORD_PLOTS)
    login(page, "demo", "demo")
    page.click("nav >> text=Submit")
    editor = page.locator("#id_spec")
    page.select_option("#template-select", "two-learners")
    page.select_option("#template-select", "pytorch")
    template = editor.input_value()
    assert "name: demo-mlp" in template and "import json, os, time, torch" in template and STEP in template
    page.fill("#id_spec", template.replace(STEP, SLOW_STEP))
    page.click("button[name=submit]")
    page.wait_for_url(JOB_URL)
    job = Job.objects.get()
    assert job.name == "demo-mlp"
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    assert job.tenant.slug == "demo" and job.owner is not None and job.owner.username == "demo"

    badge = page.locator("#job-status .badge")
    expect(badge).to_have_text("Running", timeout=30_000)
    # The timeline and the learners table follow the state changes without a reload.
    _until(lambda: "running" in _timeline(page) or page.wait_for_timeout(50), 10, "'running' in the timeline")
    learners = page.locator("#learners tr")
    expect(learners.first).to_contain_text(f"{job.pk}", timeout=10_000)
    log = page.locator("#log")
    expect(log).to_contain_text('{"step": 0, "metrics": {"loss": ', timeout=TORCH)
    expect(page.locator("#charts .chart h3", has_text="loss")).to_be_visible(timeout=10_000)
    page.wait_for_function(f"({LOSS_POINTS})() > 0", timeout=10_000)
    first = page.evaluate(LOSS_POINTS)
    page.wait_for_function(f"({LOSS_POINTS})() >= {first} + 10", timeout=20_000)
    assert 0 < first < 100  # seen while training, not after it

    expect(badge).to_have_text("Succeeded", timeout=30_000)
    expect(log).to_contain_text("training done")
    _until(lambda: _timeline(page)[-1:] == ["succeeded"] or page.wait_for_timeout(50), 10, "'succeeded' last")
    timeline = _timeline(page)
    assert timeline.index("queued") < timeline.index("running") < timeline.index("succeeded")
    expect(learners.first).to_contain_text("Succeeded", timeout=10_000)
    expect(learners.first.locator("td.num")).to_have_text("0")
    assert "Reload" not in page.locator("#job-reason").inner_text()
    page.wait_for_function(f"({LOSS_POINTS})() === 100", timeout=5_000)
    texts = log.locator(".ln").all_inner_texts()
    steps = [text for text in texts if '"step": ' in text]
    assert len(steps) == 100 and len(set(steps)) == 100  # every step's line, once
    assert len(set(texts)) == len(texts)
    assert page.evaluate("window.__sameDocument") is True
    assert _status(job) == "succeeded"
    screenshot(page, "job-live.png")


def test_cancel_from_the_job_page_and_a_bad_spec_on_the_submit_page(live_page: Any, demo: None) -> None:
    page = live_page
    login(page, "demo", "demo")
    page.goto("/jobs/new/")
    page.fill("#id_spec", BAD_SPEC)
    page.click("button[name=submit]")
    errors = page.locator("#spec-errors")
    expect(errors).to_contain_text("resources.gpus")
    expect(errors).to_contain_text("image")
    assert not Job.objects.exists()

    # Hold the page's log history (read before it subscribes) until the job is running: the status the
    # page then shows comes from the WebSocket's `subscribed` frame, not from a later `status` frame.
    held: list[Any] = []
    page.route(HISTORY, lambda route: held.append(route))
    page.fill("#id_spec", SLEEPER)
    page.click("button[name=submit]")
    page.wait_for_url(JOB_URL)
    job = Job.objects.get()
    assert job.name == "sleeper"
    _until(lambda: held or page.wait_for_timeout(50), 10, "the page to ask for the log history")
    _until(lambda: _status(job) == "running", 30, "the job to run")
    for route in held:
        route.continue_()
    page.unroute(HISTORY)
    badge = page.locator("#job-status .badge")
    expect(badge).to_have_text("Running", timeout=10_000)
    expect(page.locator("#log")).to_contain_text("up", timeout=10_000)

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=cancel]")
    page.wait_for_url(JOB_URL)
    expect(badge).to_have_text("Cancelled", timeout=30_000)
    _until(lambda: _timeline(page)[-1:] == ["cancelled"] or page.wait_for_timeout(50), 10, "'cancelled' last")
    assert _status(job) == "cancelled"
    assert "CancelledByUser" in job.events.values_list("reason", flat=True)
