"""The job page charts a long run whole: 120,000 points of two metrics (the old endpoint stopped at 10,000,
so one metric showed its first steps and the other nothing) arrive as step buckets, each chart's line
reaching the metric's last step, its band holding a one-step spike."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from tests.e2e.conftest import RECORD_PLOTS, login
from tests.factories import make_job, make_tenant, member
from tests.jobs.test_metrics_api import ACC, LOSS, bulk_points

pytestmark = pytest.mark.slow

# The last plot of the chart titled `name`: its x values, and each data column's highest value.
PLOT = """(name) => {
  const plots = (window.__plots || []).filter((p) => p.root.parentElement.querySelector("h3").textContent === name);
  if (!plots.length) return null;
  const plot = plots[plots.length - 1];
  const xs = plot.data[0];
  const highs = plot.data.slice(1).map((col) => Math.max(...col.filter((v) => v !== null)));
  return { n: xs.length, first: xs[0], last: xs[xs.length - 1], columns: plot.data.length - 1, highs };
}"""


def test_job_page_charts_every_metric_of_a_long_run_over_its_whole_range(page: Any) -> None:
    tenant = make_tenant()
    owner = member(tenant, username="longrun")
    job = make_job(tenant, owner, status="succeeded", attempt=1, started_at=timezone.now())
    bulk_points(job)

    page.add_init_script(RECORD_PLOTS)
    login(page, "longrun")
    page.goto(f"/jobs/{job.pk}/")
    page.locator("#charts .chart[data-metric=loss] canvas").wait_for()
    assert page.locator("#charts .chart h3").all_inner_texts() == ["acc", "loss"]

    acc = page.evaluate(PLOT, "acc")
    assert (acc["first"], acc["last"], acc["n"], acc["columns"]) == (59, ACC - 1, 1000, 3)
    loss = page.evaluate(PLOT, "loss")
    # Two learners: a line and a band (max, min) each, over the same 1000 buckets of 30 steps.
    assert (loss["first"], loss["last"], loss["n"], loss["columns"]) == (29, LOSS - 1, 1000, 6)
    assert loss["highs"][4] == 1000, "learner 1's band holds its one-step spike"
    assert loss["highs"][3] < 1000, "its line (the buckets' means) flattens it"
    note = page.locator("#charts .chart[data-metric=loss] .chart-note").first.inner_text()
    assert f"{2 * LOSS:,} points in step buckets" in note
