"""The comparison pages over Django's test client: the jobs list's filters and metric columns, the
comparison page (404 for another tenant's job, 400 for bad ids), and the labels form (members only)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from jobs.core.choices import EventKind
from jobs.models import MetricSample
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = {"name": "r", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_jobs_page_filters_by_experiment_and_tag_and_shows_metric_columns() -> None:
    tenant = make_tenant()
    user = member(tenant)
    tagged = make_job(tenant, user, name="tagged-run", experiment="sweep", tags=["best"])
    make_job(tenant, user, name="other-run", experiment="other")
    MetricSample.objects.create(
        job=tagged, learner=0, attempt=1, name="loss", step=1, value=0.5, ts=timezone.now(), log_seq=1
    )
    client = signed_in(user)
    page = client.get("/jobs/?experiment=sweep&metrics=loss").content.decode()
    assert "tagged-run" in page and "other-run" not in page
    assert 'class="metric-last">0.5<' in page and "last / best (min)" in page
    page = client.get("/jobs/?tag=best").content.decode()
    assert "tagged-run" in page and "other-run" not in page
    bad = client.get("/jobs/?metrics=loss:best")
    assert bad.status_code == 200 and "min or max" in bad.content.decode()


def test_compare_page_shows_the_tables_and_refuses_other_tenants_jobs() -> None:
    tenant = make_tenant()
    user = member(tenant)
    first = make_job(tenant, user, name="first", spec=SPEC | {"hyperparameters": {"lr": 0.1}})
    second = make_job(tenant, user, name="second", spec=SPEC | {"hyperparameters": {"lr": 0.2}})
    client = signed_in(user)
    response = client.get(f"/jobs/compare/?ids={first.pk}&ids={second.pk}")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="differs"' in page and 'id="compare-data"' in page
    assert f"/api/v1/jobs/compare/?ids={first.pk},{second.pk}&amp;format=csv" in page
    foreign = make_job(make_tenant())
    assert client.get(f"/jobs/compare/?ids={first.pk},{foreign.pk}").status_code == 404
    assert client.get(f"/jobs/compare/?ids={first.pk},nosuchjob").status_code == 404
    too_many = client.get("/jobs/compare/?ids=" + ",".join(f"j{i}" for i in range(11)))
    assert too_many.status_code == 400 and "at most 10" in too_many.content.decode()
    assert client.get("/jobs/compare/").status_code == 400
    assert Client().get(f"/jobs/compare/?ids={first.pk}").status_code == 302


def test_labels_form_for_members_only() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    job = make_job(tenant, owner, experiment="a")
    colleague, viewer = member(tenant), member(tenant, "viewer")
    response = signed_in(colleague).post(f"/jobs/{job.pk}/labels/", {"experiment": "b", "tags": "x, y"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.experiment, job.tags) == ("b", ["x", "y"])
    assert job.events.filter(kind=EventKind.LABELS, actor=colleague).count() == 1
    assert signed_in(viewer).post(f"/jobs/{job.pk}/labels/", {"experiment": "c"}).status_code == 403
    outsider = member(make_tenant())
    assert signed_in(outsider).post(f"/jobs/{job.pk}/labels/", {"experiment": "c"}).status_code == 404
    bad = signed_in(colleague).post(
        f"/jobs/{job.pk}/labels/", {"experiment": "c", "tags": "no spaces!"}, follow=True
    )
    assert "Labels not saved" in bad.content.decode()
    job.refresh_from_db()
    assert job.experiment == "b"
    page = signed_in(viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert "labels-form" not in page and "#x" in page
