"""TensorBoard end to end, with real parts only: a job on kubesim writes event files with torch's
SummaryWriter under its `evaluation_metrics.in` folder; the launcher sends them to the live daphne server
while it trains; their scalars become the job's metrics (API) and are charted live on its page; the page's
TensorBoard link opens the job's own TensorBoard through the portal for its tenant, and is a 404 for another
tenant's user (and a login for nobody).

Processes: the live daphne server (artifact endpoints, pages, the TensorBoard process it starts and stops
when it exits) and, in this process, the job engine's worker and watcher (`engine`) on the session's kubesim.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from jobs.models import EventFile, Job, MetricSample
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.clusters import pod_url
from tests.e2e.conftest import RECORD_PLOTS, _new_page, login, screenshot
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEPS = 40
TRAIN = f"""
import math, os, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(os.path.join(os.environ["RESULT_DIR"], "tb", "train"))
print("writing", flush=True)
for step in range({STEPS}):
    writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.add_scalar("lr", 0.1 * math.cos(step / 10), step)
    writer.flush()
    time.sleep(0.3)
writer.close()
print("done", flush=True)
"""
POINTS = """(name) => {
  const plots = (window.__plots || []).filter((p) => p.root.parentElement.querySelector("h3").textContent === name);
  return plots.length ? plots[plots.length - 1].data[0].length : 0;
}"""


@pytest.mark.kubesim_only
def test_summary_writer_scalars_become_metrics_charted_live_and_tensorboard_opens_for_the_tenant_only(
    engine: KubeSim, live_server_url: str, browser: Any, settings: Any
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    settings.TENSORBOARD_SYNC_SECONDS = 0.5
    tenant = make_tenant()
    user = member(tenant, username="tb-owner")
    stranger = member(make_tenant(), username="tb-stranger")
    document = python_spec(
        "tensorboard-job", TRAIN, cpu="1", memory="1Gi",
        evaluation_metrics={"type": "tensorboard", "in": "$JOB_STATE_DIR/tb"},
    )  # fmt: skip
    job = job_submit(tenant=tenant, user=user, document=document)

    pages = _new_page(browser, live_server_url)
    page = next(pages)
    try:
        page.add_init_script(RECORD_PLOTS)
        login(page, "tb-owner")
        wait_status(job, "running", timeout=60, logs=True)
        page.goto(f"/jobs/{job.pk}/")
        # train/loss is charted as the train variant of "loss" (static/js/charts.js groups variants)
        chart = page.locator("#charts .chart h3", has_text="loss")
        expect(chart).to_be_visible(timeout=90_000)  # importing torch in the pod takes a while
        seen = page.evaluate(POINTS, "loss")
        job = wait_status(job, "succeeded", timeout=120, logs=True)
        page.wait_for_function(f"({POINTS})('loss') === {STEPS}", timeout=20_000)
        assert seen < STEPS, "some points were charted while the job still trained (live, not on reload)"

        # The engine's side: every scalar once, by step, from the event file.
        loss = list(
            MetricSample.objects.filter(job=job, name="train/loss")
            .order_by("step")
            .values_list("step", "value")
        )
        assert loss == [(step, pytest.approx(1.0 / (step + 1))) for step in range(STEPS)], describe(job)
        assert MetricSample.objects.filter(job=job, name="train/lr").count() == STEPS
        assert not MetricSample.objects.filter(job=job).exclude(log_seq=0).exists()
        (event_file,) = EventFile.objects.filter(job=job)
        assert event_file.path.startswith("train/events.out.tfevents.") and event_file.error == ""
        assert event_file.parsed == event_file.size and len(event_file.chunks) > 1, (
            "sent in pieces as it grew"
        )

        # The page's link (shown once event files came, without a reload) opens the job's TensorBoard.
        link = page.locator("#tensorboard-link")
        expect(link).to_be_visible()
        page.reload()
        expect(link).to_be_visible()
        href = link.get_attribute("href")
        assert href == f"/jobs/{job.pk}/tensorboard/"
        answers: list[tuple[str, str, int]] = []
        page.on("response", lambda r: answers.append((r.request.method, r.url, r.status)))
        # Its page's own data queries (POSTs without Django's CSRF token) go through the proxy too.
        series_query = page.expect_response(
            lambda r: r.request.method == "POST" and "/timeSeries" in r.url, timeout=120_000
        )
        with series_query as series:
            answer = page.goto(href, timeout=120_000)
        assert answer is not None and answer.status == 200
        series_text = series.value.text()  # one query per tag: loss or lr, each with every step
        assert series.value.status == 200 and '"attempt-1/learner-0/train"' in series_text, series_text
        assert f'"step": {STEPS - 1}' in series_text, series_text
        expect(page).to_have_title("TensorBoard", timeout=30_000)
        expect(page.get_by_text("attempt-1/learner-0/train").first).to_be_visible(timeout=30_000)
        failed = [(m, u, s) for m, u, s in answers if "/tensorboard/" in u and s >= 400]
        assert not failed, failed
        tags = page.request.get(f"/jobs/{job.pk}/tensorboard/data/plugin/scalars/tags")
        assert tags.status == 200
        assert "train/loss" not in json.dumps(tags.json()) and "loss" in json.dumps(tags.json())
        assert "attempt-1/learner-0/train" in tags.json()
        screenshot(page, "tensorboard-live.png")
    finally:
        next(pages, None)

    # Another tenant's user: a 404, exactly as for a job that does not exist; nobody: the login page.
    strangers = _new_page(browser, live_server_url)
    other = next(strangers)
    try:
        login(other, stranger.username)
        denied = other.goto(f"/jobs/{job.pk}/tensorboard/")
        assert denied is not None and denied.status == 404
        assert other.request.get(f"/jobs/{job.pk}/tensorboard/data/runs").status == 404
    finally:
        next(strangers, None)
    anonymous = httpx.get(f"{live_server_url}/jobs/{job.pk}/tensorboard/", follow_redirects=False, timeout=30)
    assert anonymous.status_code == 302 and "/login/" in anonymous.headers["location"]
    assert Job.objects.get(pk=job.pk).status == "succeeded"
