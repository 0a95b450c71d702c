"""Comparing runs in a real browser: tick three jobs in the list, open the comparison, read the overlaid
curves, the hyperparameter table and the final metrics, switch to a log scale, zoom and reset, and download
the CSV; change a job's labels from its page."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from jobs.models import Job, MetricSample
from tests.e2e.conftest import RECORD_PLOTS, login, screenshot
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.slow

LIVE_PLOTS = "(window.__plots || []).filter((p) => p.root.isConnected)"


@pytest.fixture
def runs() -> list[Job]:
    team = make_tenant("vision")
    alice = member(team, "member", username="alice")
    now = timezone.now()
    jobs = []
    for index, lr in enumerate((0.1, 0.01, 0.001)):
        job = make_job(
            team,
            alice,
            name=f"resnet-lr{lr}",
            status="succeeded",
            started_at=now - timedelta(minutes=30),
            finished_at=now - timedelta(minutes=5 * index),
            experiment="lr-sweep",
            tags=["sweep"],
            spec={
                "name": f"resnet-lr{lr}",
                "image": "pytorch/pytorch:2.3",
                "command": ["python", "train.py"],
                "hyperparameters": {"lr": lr, "batch_size": 64},
            },
        )
        start = now - timedelta(minutes=30)
        MetricSample.objects.bulk_create(
            MetricSample(
                job=job,
                learner=0,
                attempt=1,
                name=name,
                step=step * 100_000,
                value=value,
                ts=start + timedelta(seconds=step * 10),
                log_seq=step + 1,
            )
            for step in range(10)
            for name, value in (
                ("loss", 900_000 / (step + 1 + index)),
                ("val_loss", 950_000 / (step + 1 + index)),
                ("accuracy", 0.5 + 0.04 * step - 0.02 * index),
            )
        )
        jobs.append(job)
    MetricSample.objects.bulk_create(
        MetricSample(
            job=jobs[0], learner=0, attempt=1, name="reward", step=s, value=-1.0 - s, ts=now, log_seq=100 + s
        )
        for s in range(5)
    )
    make_job(team, alice, name="not-compared")
    return jobs


def test_compare_three_runs_from_the_jobs_list(page: Any, runs: list[Job], tmp_path: Path) -> None:
    page.add_init_script(RECORD_PLOTS)
    login(page, "alice")
    page.goto("/jobs/?metrics=loss,accuracy")
    first = page.locator(f"tr[data-job-id='{runs[0].pk}']")
    assert "lr-sweep" in first.inner_text() and "#sweep" in first.inner_text()
    assert first.locator("td[data-metric='0'] .metric-last").inner_text() == "90000"  # loss: last
    assert "/ 90000" in first.locator("td[data-metric='0']").inner_text()  # best = min
    assert "/ 0.86" in first.locator("td[data-metric='1']").inner_text()  # accuracy: best = max
    assert first.locator("td[data-duration]").inner_text() == "30m 00s"

    compare = page.locator("#compare-button")
    assert compare.is_disabled()
    for job in runs:
        page.locator(f"tr[data-job-id='{job.pk}'] input[data-compare]").check()
    assert compare.inner_text() == "Compare 3" and compare.is_enabled()
    screenshot(page, "jobs-compare-ticked.png")
    compare.click()
    page.wait_for_url(re.compile(r"/jobs/compare/\?"))
    shown = list(reversed(runs))  # in the list's order: newest first

    charts = page.locator("#charts .chart")
    charts.first.locator("canvas").wait_for()
    assert page.locator("#charts .chart h3").all_inner_texts() == ["accuracy", "loss", "reward"]
    loss = page.locator("#charts .chart[data-metric='loss']")
    assert loss.get_attribute("data-series") == "6"
    legend = loss.locator(".u-legend .u-series .u-label").all_inner_texts()
    for metric in ("loss", "val_loss"):
        assert sorted(label for label in legend if label.endswith(f"· {metric}")) == sorted(
            f"{job.name} · {metric}" for job in runs
        ), legend
    assert page.locator("#charts .chart[data-metric='accuracy']").get_attribute("data-series") == "3"

    lr = page.locator("#hyperparameters tr[data-name='lr']")
    assert "differs" in (lr.get_attribute("class") or "")
    assert lr.locator("td").all_inner_texts() == ["0.001", "0.01", "0.1"]
    assert "differs" not in (
        page.locator("#hyperparameters tr[data-name='batch_size']").get_attribute("class") or ""
    )
    final = page.locator("#final-metrics tr[data-name='loss'] td").all_inner_texts()
    assert [cell.split(" / ")[0] for cell in final] == ["75000", "81818.2", "90000"]

    # The loss axes read in SI units (900k, not 900000) and the x axis in steps of 100k.
    labels = page.evaluate(
        f"{LIVE_PLOTS}.find((p) => p.root.parentElement.dataset.metric === 'loss').axes.map((a) => a._values)"
    )
    assert any(re.fullmatch(r"[0-9.]+k", label) for label in labels[0]), labels
    assert any(re.fullmatch(r"[0-9.]+k", label) for label in labels[1]), labels

    page.locator("[data-tool=log]").check()
    page.wait_for_function("document.querySelectorAll('#charts .chart[data-scale=log]').length === 2")
    reward = page.locator("#charts .chart[data-metric='reward']")
    assert reward.get_attribute("data-scale") == "linear"
    assert "No positive values" in reward.locator(".chart-log-note").inner_text()
    page.locator("[data-tool=smoothing]").fill("0.6")
    assert page.locator("[data-tool=smoothing-value]").inner_text() == "0.6"

    # Drag to zoom, reset to the whole range.
    whole = page.evaluate(f"{LIVE_PLOTS}.map((p) => [p.scales.x.min, p.scales.x.max])[1]")
    over = loss.locator(".u-over").bounding_box()
    assert over is not None
    page.mouse.move(over["x"] + over["width"] * 0.3, over["y"] + over["height"] / 2)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.6, over["y"] + over["height"] / 2, steps=5)
    page.mouse.up()
    zoomed = page.evaluate(f"{LIVE_PLOTS}.map((p) => [p.scales.x.min, p.scales.x.max])[1]")
    assert zoomed[1] - zoomed[0] < (whole[1] - whole[0]) / 2, (whole, zoomed)
    page.click("[data-tool=reset]")
    assert page.evaluate(f"{LIVE_PLOTS}.map((p) => [p.scales.x.min, p.scales.x.max])[1]") == whole

    # x as time since each run's start: 0 to 90 s, labelled as durations.
    page.select_option("[data-tool=x]", "time")
    page.wait_for_function("document.querySelectorAll('#charts .chart[data-x=time]').length === 3")
    ticks = page.evaluate(
        f"{LIVE_PLOTS}.find((p) => p.root.parentElement.dataset.metric === 'loss').axes[0]._values"
    )
    assert ticks and all(re.fullmatch(r"[0-9.]+s", tick) for tick in ticks), ticks
    page.select_option("[data-tool=x]", "step")

    loss.locator("[data-tool=wide]").click()
    assert "chart-wide" in (loss.get_attribute("class") or "")
    screenshot(page, "compare.png")

    with page.expect_download() as download:
        page.click("#csv-download")
    saved = tmp_path / "comparison.csv"
    download.value.save_as(saved)
    rows = list(csv.reader(io.StringIO(saved.read_text())))
    assert [row[0] for row in rows[1:]] == [job.pk for job in shown]
    assert "hp.lr" in rows[0] and "val_loss.best" in rows[0]


def test_a_member_changes_a_jobs_labels_from_its_page(page: Any, runs: list[Job]) -> None:
    login(page, "alice")
    page.goto(f"/jobs/{runs[0].pk}/")
    assert page.locator("#job-experiment").inner_text() == "lr-sweep"
    page.click("text=Edit experiment and tags")
    page.fill("#labels-form input[name=experiment]", "lr-sweep-2")
    page.fill("#labels-form input[name=tags]", "sweep, best")
    page.click("#labels-form button")
    page.locator("#job-tags", has_text="#best").wait_for()
    runs[0].refresh_from_db()
    assert (runs[0].experiment, runs[0].tags) == ("lr-sweep-2", ["sweep", "best"])
    assert "changed by alice" in page.locator("#events").inner_text()
