"""Page defects a person saw in a browser (issue 29 item 8), each checked where a browser shows it: the
portal's own 404 page and favicon, ..."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import JobEvent, Learner, MetricSample
from jobs.notifications.models import Subscription
from tests.e2e.conftest import login, screenshot
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.slow


def test_a_missing_page_answers_with_the_portals_own_404_and_every_page_has_a_favicon(page: Any) -> None:
    member(make_tenant("vision"), "member", username="alice")
    login(page, "alice")
    response = page.goto("/no-such-page/")
    assert response is not None and response.status == 404
    expect(page.locator("#not-found h1")).to_have_text("Page not found")
    expect(page.locator("header.topbar .brand")).to_be_visible()  # the portal's look, not Django's bare page
    expect(page.locator("#not-found code")).to_have_text("/no-such-page/")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon
    favicon = page.request.get(icon)
    assert favicon.status == 200
    assert favicon.headers["content-type"].startswith("image/svg+xml")


def test_every_input_of_the_secret_forms_has_the_portals_input_style(page: Any) -> None:
    team = make_tenant("vision")
    member(team, "owner", username="olga")
    login(page, "olga")
    page.goto(f"/tenants/{team.slug}/")
    inputs = page.locator("#secret-create input:not([type=hidden])")
    expect(inputs).to_have_count(4)
    styles = inputs.evaluate_all(
        "(els) => els.map((el) => { const s = getComputedStyle(el);"
        " return [el.name, s.borderTopColor, s.borderTopLeftRadius, s.paddingLeft]; })"
    )
    password = next(style[1:] for style in styles if style[0] == "secret_access_key")
    assert password[1] == "6px"
    assert [style[1:] for style in styles] == [password] * 4, styles


def test_a_finished_job_says_it_has_no_results_or_tuning_decisions_not_that_none_came_yet(page: Any) -> None:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    running = make_job(team, alice, status="running")
    done = make_job(team, alice, status="succeeded")
    login(page, "alice")
    page.goto(f"/jobs/{running.pk}/")
    expect(page.locator("#no-results")).to_contain_text("No result files yet")
    expect(page.locator("#job-tuning")).to_contain_text("No tuning decisions yet.")
    page.goto(f"/jobs/{done.pk}/")
    expect(page.locator("#no-results")).to_have_text(
        "No result files: the learners left nothing in RESULT_DIR."
    )
    expect(page.locator("#job-tuning")).to_have_text("The tuner made no decisions for this job.")
    expect(page.locator("#job-telemetry")).to_have_text("No telemetry was recorded for this job.")
    assert "yet" not in page.locator("#results").inner_text() + page.locator("#tuning").inner_text()


def test_creating_a_webhook_redirects_to_its_page_and_a_reload_neither_repeats_it_nor_shows_the_secret(
    page: Any,
) -> None:
    member(make_tenant("vision"), "member", username="alice")
    login(page, "alice")
    page.goto("/notifications/")
    page.fill("#id_name", "ci hook")
    page.select_option("#id_channel", "webhook")
    page.fill("#id_url", "http://127.0.0.1:9/hook")
    page.click("#subscription-form button[type=submit]")
    expect(page.locator("#secret [data-secret]")).to_contain_text("whsec_")
    (sub,) = Subscription.objects.all()
    assert page.url.endswith(f"/notifications/{sub.pk}/")  # a GET: the browser's history holds no POST
    page.reload()
    expect(page.locator("h1")).to_contain_text("ci hook")
    expect(page.locator("#secret")).to_have_count(0)
    assert Subscription.objects.count() == 1


def test_compare_without_ids_says_what_to_do_and_raises_no_script_error(page: Any) -> None:
    member(make_tenant("vision"), "member", username="alice")
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    login(page, "alice")
    response = page.goto("/jobs/compare/")
    assert response is not None and response.status == 400
    expect(page.locator("h1")).to_have_text("Compare runs")
    expect(page.locator("#compare-problem")).to_contain_text("name the jobs to compare")
    page.wait_for_load_state("load")
    assert errors == []


def test_the_comparisons_tables_line_up_and_its_charts_share_the_whole_width(page: Any) -> None:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    now = timezone.now()
    runs = [
        make_job(
            team,
            alice,
            name=name,
            status="succeeded",
            started_at=now - timedelta(minutes=10),
            finished_at=now,
            spec={
                "name": name,
                "image": "pytorch/pytorch:2.3",
                "command": ["python", "train.py"],
                "hyperparameters": hp,
            },
        )
        for name, hp in (
            ("a-run-with-a-rather-long-name", {"lr": 0.1, "optimizer": "sgd"}),
            ("b", {"lr": 0.0001, "optimizer": "adamw-with-decoupled-weight-decay"}),
        )
    ]
    MetricSample.objects.bulk_create(
        MetricSample(
            job=job,
            learner=0,
            attempt=1,
            name=name,
            step=step,
            value=1.0 / (step + 1),
            ts=now,
            log_seq=step + 1,
        )
        for job in runs
        for step in range(5)
        for name in ("loss", "accuracy")
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    login(page, "alice")
    page.goto("/jobs/compare/?ids=" + ",".join(job.pk for job in runs))
    expect(page.locator("h1")).to_have_text("Compare 2 runs")
    page.locator("#charts .chart canvas").first.wait_for()
    columns = {
        table: page.locator(f"#{table} thead th").evaluate_all(
            "(cells) => cells.map((c) => Math.round(c.getBoundingClientRect().left))"
        )
        for table in ("compare-runs", "hyperparameters", "final-metrics")
    }
    assert columns["compare-runs"] == columns["hyperparameters"] == columns["final-metrics"], columns
    box = page.locator("#charts").bounding_box()
    charts = [chart.bounding_box() for chart in page.locator("#charts .chart").all()]
    assert len(charts) == 2 and box and all(charts)
    assert charts[0]["y"] == charts[1]["y"]  # side by side
    right = max(c["x"] + c["width"] for c in charts if c)
    assert right >= box["x"] + box["width"] - 2, (charts, box)  # no empty third of the card
    canvas = page.locator("#charts .chart").last.locator("canvas").first.bounding_box()
    assert canvas and canvas["width"] >= charts[1]["width"] * 0.9  # the plot fills its wider cell


def test_after_a_halt_and_resume_the_halted_learner_reads_stopped_and_the_times_are_the_current_attempts(
    page: Any,
) -> None:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    at = [t0 + timedelta(minutes=minute) for minute in range(7)]
    job = make_job(team, alice, status="running", attempt=2, admitted_at=at[5], started_at=at[1])
    moves = [
        ("queued", "starting"), ("starting", "running"), ("running", "halting"), ("halting", "halted"),
        ("halted", "requeued"), ("requeued", "starting"), ("starting", "running"),
    ]  # fmt: skip
    for when, (before, after) in zip(at, moves, strict=True):
        JobEvent.objects.create(
            job=job, kind="transition", from_status=before, to_status=after, created_at=when
        )
    Learner.objects.create(
        job=job, attempt=1, index=0, pod_name="p-1-0", phase="Failed", exit_code=143, reason="Error"
    )
    Learner.objects.create(job=job, attempt=2, index=0, pod_name="p-2-0", phase="Running")
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    rows = page.locator("#learners tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td[data-phase]")).to_have_text("Running")
    expect(rows.nth(1).locator("td[data-phase]")).to_have_text("Stopped halted")
    expect(page.locator("#learners .chip-failed")).to_have_count(0)
    shown = {
        name: page.locator(f"[data-time={name}]").inner_text()
        for name in ("first-started", "admitted", "started")
    }
    assert shown["admitted"] <= shown["started"], shown  # the same attempt's times, in order
    assert shown["first-started"] < shown["admitted"], shown
    expect(page.locator("dt", has_text="Started")).to_contain_text(["First started", "Started attempt 2"])


def test_a_few_seconds_of_gpu_time_is_a_sliver_labelled_with_its_amount_not_a_full_bar_of_zero(
    page: Any,
) -> None:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    now = timezone.now()
    make_job(
        team, alice, status="succeeded", gpus=1, started_at=now - timedelta(seconds=7.2), finished_at=now
    )
    login(page, "alice")
    page.goto(f"/tenants/{team.slug}/")
    today = page.locator(".bars .bar-col").last
    expect(today.locator(".bar-val")).to_have_text("0.002")
    expect(page.locator("#gpuh-h + .muted")).to_have_text("last 14 days · 0.002 in all")
    bar = today.locator(".bar").bounding_box()
    column = page.locator(".bars").bounding_box()
    assert bar and column and bar["height"] < column["height"] * 0.05, (bar, column)


def test_the_submit_pages_code_label_reads_on_one_line_beside_its_file_input(page: Any) -> None:
    member(make_tenant("vision"), "member", username="alice")
    login(page, "alice")
    page.goto("/jobs/new/")
    text = page.locator("#code-field > span")
    expect(text).to_have_text("Code (optional ZIP, unpacked into MODEL_DIR)")
    words = text.bounding_box()
    line = float(text.evaluate("(el) => parseFloat(getComputedStyle(el).lineHeight) || 20"))
    upload = page.locator("#code-field input[type=file]").bounding_box()
    assert words and upload
    assert words["height"] < 1.5 * line, (words, line)  # one line, not three
    assert upload["x"] >= words["x"] + words["width"] - 1  # the input beside it
    assert abs(words["x"] - page.locator("#spec-editor").bounding_box()["x"]) < 2  # flush left, not centred


def test_the_jobs_list_with_two_metric_columns_fits_a_1440_px_window_submitted_column_included(
    page: Any,
) -> None:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    now = timezone.now()
    for index in range(3):
        job = make_job(
            team,
            alice,
            name=f"resnet50-imagenet-sweep-lr{index}",
            status="running",
            created_at=now - timedelta(days=9, hours=5),
            started_at=now - timedelta(days=9, hours=4, minutes=index, seconds=7),
            learners=4,
            gpus=8,
            cpu_millis=16000,
            memory_mib=65536,
            experiment="imagenet-lr-sweep",
            tags=["sweep", "resnet50"],
        )
        MetricSample.objects.bulk_create(
            MetricSample(job=job, learner=0, attempt=1, name=name, step=1, value=value, ts=now, log_seq=seq)
            for seq, (name, value) in enumerate(
                (("validation/cross_entropy", -1.23456789e-05), ("validation/top5_accuracy", 1234567.89)), 1
            )
        )
    page.set_viewport_size({"width": 1440, "height": 900})
    login(page, "alice")
    page.goto("/jobs/?metrics=validation/cross_entropy,validation/top5_accuracy")
    expect(page.locator("th.metric-col")).to_have_count(2)
    wrap = page.locator(".jobs-table").locator("xpath=..")
    widths = wrap.evaluate("(el) => [el.scrollWidth, el.clientWidth]")
    screenshot(page, "jobs-1440-metrics.png")
    assert widths[0] <= widths[1], widths  # nothing to scroll to
    submitted = page.locator(".jobs-table th", has_text="Submitted").bounding_box()
    box = wrap.bounding_box()
    assert submitted and box and submitted["x"] + submitted["width"] <= box["x"] + box["width"] + 1
