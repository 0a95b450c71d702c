"""Experiments, tags and comparison through the REST API: labels from the spec and changed by PATCH (with
its event and its permissions), list filters, metric columns computed per page, and the comparison of
several jobs as JSON and CSV, bounded and scoped to the user's tenants."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.core.choices import EventKind
from jobs.models import Job, MetricSample
from jobs.services import job_submit
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def add_metrics(job: Job, name: str, values: list[float], learner: int = 0) -> None:
    start = timezone.now() - timedelta(hours=1)
    MetricSample.objects.bulk_create(
        MetricSample(
            job=job,
            learner=learner,
            attempt=1,
            name=name,
            step=step * 10,
            value=value,
            ts=start + timedelta(seconds=step),
            log_seq=step + 1,
        )
        for step, value in enumerate(values)
    )


def run(tenant: Any, owner: Any, name: str, hyper: dict[str, Any], **fields: Any) -> Job:
    return make_job(tenant, owner, name=name, spec=SPEC | {"name": name, "hyperparameters": hyper}, **fields)


def test_submit_copies_experiment_and_tags_onto_the_job() -> None:
    tenant = make_tenant()
    user = member(tenant)
    spec = SPEC | {"experiment": "sweep", "tags": ["base", "a100"], "hyperparameters": {"lr": 0.1}}
    response = api(user).post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["experiment"] == "sweep" and body["tags"] == ["base", "a100"]
    assert body["spec"]["hyperparameters"] == {"lr": 0.1}
    assert body["duration_seconds"] is None and body["metrics"] is None


def test_bad_labels_in_a_submission_are_field_errors_and_nothing_is_stored() -> None:
    tenant = make_tenant()
    spec = SPEC | {"tags": ["ok", "no spaces please"], "hyperparameters": {"lr": {"nested": 1}}}
    response = api(member(tenant)).post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "tags[1]" in errors and "hyperparameters.lr" in errors
    assert not Job.objects.exists()


def test_patch_changes_labels_records_an_event_and_refuses_bad_input() -> None:
    tenant = make_tenant()
    owner, colleague, viewer = member(tenant), member(tenant), member(tenant, "viewer")
    job = job_submit(tenant=tenant, user=owner, document=SPEC | {"experiment": "old", "tags": ["a"]})
    url = f"/api/v1/jobs/{job.pk}/"

    response = api(colleague).patch(url, {"tags": ["b", "c", "b"]}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["b", "c"] and response.json()["experiment"] == "old"
    event = job.events.get(kind=EventKind.LABELS)
    assert event.actor == colleague and event.data == {
        "before": {"experiment": "old", "tags": ["a"]},
        "after": {"experiment": "old", "tags": ["b", "c"]},
    }
    assert "tags changed by" in event.message

    bad = api(owner).patch(url, {"experiment": "x\ny", "tags": ["fine"]}, content_type="application/json")
    assert bad.status_code == 400 and "experiment" in bad.json()["errors"]
    unknown = api(owner).patch(url, {"name": "renamed"}, content_type="application/json")
    assert unknown.status_code == 400 and "name" in unknown.json()["errors"]
    assert api(viewer).patch(url, {"experiment": "mine"}, content_type="application/json").status_code == 403
    outsider = member(make_tenant())
    assert (
        api(outsider).patch(url, {"experiment": "mine"}, content_type="application/json").status_code == 404
    )
    job.refresh_from_db()
    assert (job.experiment, job.tags) == ("old", ["b", "c"])
    assert job.events.filter(kind=EventKind.LABELS).count() == 1

    same = api(owner).patch(url, {"tags": ["b", "c"]}, content_type="application/json")
    assert same.status_code == 200 and job.events.filter(kind=EventKind.LABELS).count() == 1


def test_a_retry_and_a_clone_carry_the_labels_as_they_are_now() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(
        tenant=tenant, user=user, document=SPEC | {"experiment": "old", "hyperparameters": {"lr": 1}}
    )
    client = api(user)
    client.patch(
        f"/api/v1/jobs/{job.pk}/", {"experiment": "new", "tags": ["t"]}, content_type="application/json"
    )
    Job.objects.filter(pk=job.pk).update(status="failed")
    retry = client.post(f"/api/v1/jobs/{job.pk}/retry/")
    assert retry.status_code == 201, retry.content
    assert (retry.json()["experiment"], retry.json()["tags"]) == ("new", ["t"])
    assert retry.json()["spec"]["hyperparameters"] == {"lr": 1}
    clone = client.get(f"/jobs/new/?clone={job.pk}").content.decode()
    assert "experiment: new" in clone and "- t" in clone


def test_list_filters_by_experiment_and_tag() -> None:
    tenant = make_tenant()
    user = member(tenant)
    first = make_job(tenant, user, experiment="sweep", tags=["base", "gpu"])
    second = make_job(tenant, user, experiment="sweep", tags=["gpu"])
    make_job(tenant, user, experiment="other", tags=["base"])
    client = api(user)

    def ids(query: str) -> set[str]:
        response = client.get(f"/api/v1/jobs/?{query}")
        assert response.status_code == 200, response.content
        return {job["id"] for job in response.json()["results"]}

    assert ids("experiment=sweep") == {first.pk, second.pk}
    assert ids("experiment=sweep&tag=base") == {first.pk}
    assert ids("tag=gpu") == {first.pk, second.pk}
    assert ids("tag=base,gpu") == {first.pk}
    assert ids("tag=nothing") == set()
    assert client.get("/api/v1/jobs/?tag=a%00b").status_code == 400


def test_metric_columns_give_last_and_best_in_queries_independent_of_the_page_size() -> None:
    tenant = make_tenant()
    user = member(tenant)
    now = timezone.now()
    jobs = [
        make_job(tenant, user, status="succeeded", started_at=now - timedelta(minutes=10), finished_at=now)
        for _ in range(6)
    ]
    for index, job in enumerate(jobs):
        add_metrics(job, "loss", [3.0, 1.0 + index, 2.0 + index])
        add_metrics(job, "accuracy", [0.5, 0.9, 0.7])
    add_metrics(jobs[0], "loss", [99.0], learner=1)  # another learner: not the latest point by time
    client = api(user)

    response = client.get("/api/v1/jobs/?metrics=loss,accuracy,bleu")
    assert response.status_code == 200, response.content
    rows = {row["id"]: row for row in response.json()["results"]}
    first = rows[jobs[1].pk]
    assert first["metrics"]["loss"] == {"last": 3.0, "step": 20, "best": 2.0, "mode": "min"}
    assert first["metrics"]["accuracy"] == {"last": 0.7, "step": 20, "best": 0.9, "mode": "max"}
    assert first["metrics"]["bleu"] == {"last": None, "step": None, "best": None, "mode": "max"}
    assert first["duration_seconds"] == pytest.approx(600)
    assert rows[jobs[0].pk]["metrics"]["loss"]["best"] == 1.0

    explicit = client.get("/api/v1/jobs/?metrics=accuracy:min").json()["results"]
    assert {row["metrics"]["accuracy"]["best"] for row in explicit} == {0.5}

    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/jobs/?metrics=loss&page_size=2")
    with CaptureQueriesContext(connection) as many:
        client.get("/api/v1/jobs/?metrics=loss&page_size=6")
    assert len(few.captured_queries) == len(many.captured_queries)


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("metrics=loss:best", "min or max"),
        ("metrics=a,b,c,d,e,f,g,h,i", "at most 8"),
        ("metrics=x%00", "NUL"),
    ],
)
def test_bad_metric_columns_are_400(query: str, fragment: str) -> None:
    response = api(member(make_tenant())).get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    assert fragment in " ".join(response.json()["errors"]["metrics"])


def compare_setup() -> tuple[Any, list[Job]]:
    tenant = make_tenant()
    user = member(tenant)
    jobs = [
        run(tenant, user, "a", {"lr": 0.1, "batch": 64}, experiment="sweep", tags=["x"]),
        run(tenant, user, "b", {"lr": 0.01, "batch": 64}),
        run(tenant, user, "c", {"lr": 0.001, "batch": 64, "amp": True}),
    ]
    for index, job in enumerate(jobs):
        add_metrics(job, "loss", [2.0 / (step + 1 + index) for step in range(50)])
        add_metrics(job, "val_loss", [2.5 / (step + 1 + index) for step in range(5)])
    add_metrics(jobs[0], "accuracy", [0.1, 0.8, 0.6])
    return user, jobs


def test_compare_gives_hyperparameters_final_metrics_and_overlaid_curves() -> None:
    user, jobs = compare_setup()
    ids = ",".join(job.pk for job in reversed(jobs))
    response = api(user).get(f"/api/v1/jobs/compare/?ids={ids}&points=20")
    assert response.status_code == 200, response.content
    body = response.json()
    assert [job["name"] for job in body["jobs"]] == ["c", "b", "a"]
    assert body["jobs"][2]["experiment"] == "sweep" and body["jobs"][2]["tags"] == ["x"]
    rows = {row["name"]: row for row in body["hyperparameters"]}
    assert rows["lr"] == {"name": "lr", "values": [0.001, 0.01, 0.1], "differs": True}
    assert rows["batch"]["differs"] is False and rows["amp"]["values"] == [True, None, None]
    metrics = {row["name"]: row for row in body["metrics"]}
    assert metrics["loss"]["mode"] == "min" and metrics["accuracy"]["mode"] == "max"
    assert [v["last"] for v in metrics["accuracy"]["values"][:2]] == [None, None]
    assert metrics["accuracy"]["values"][2]["best"] == 0.8 and metrics["accuracy"]["values"][2]["last"] == 0.6
    assert metrics["loss"]["values"][2]["last"] == pytest.approx(2.0 / 50)

    charts = {chart["metric"]: chart["series"] for chart in body["charts"]}
    assert set(charts) == {"accuracy", "loss"}
    loss = charts["loss"]
    assert [(s["job"], s["name"]) for s in loss] == [
        (jobs[2].pk, "loss"), (jobs[1].pk, "loss"), (jobs[0].pk, "loss"),
        (jobs[2].pk, "val_loss"), (jobs[1].pk, "val_loss"), (jobs[0].pk, "val_loss"),
    ]  # fmt: skip
    train = loss[0]
    assert train["total"] == 50 and len(train["value"]) <= 20
    # 20 buckets of equal width over steps 0..490: each holds two or three points, the last ends at 490.
    assert train["step"][0] == 20 and train["step"][-1] == 490, "the whole range is charted"
    assert train["min"][0] == pytest.approx(2.0 / 5) and train["max"][0] == pytest.approx(2.0 / 3)
    assert train["value"][0] == pytest.approx((2.0 / 3 + 2.0 / 4 + 2.0 / 5) / 3)
    # Drawn at its latest point (step 20, two seconds after the job's first point, step 0).
    assert train["time"][0] == pytest.approx(2.0, abs=0.01)
    assert train["variant"] == "" and loss[3]["variant"] == "val"
    assert len(loss[3]["value"]) == 5


def test_compare_csv_has_a_row_per_job() -> None:
    user, jobs = compare_setup()
    jobs[1].tags = ["=cmd()"]
    jobs[1].save()
    ids = ",".join(job.pk for job in jobs)
    response = api(user).get(f"/api/v1/jobs/compare/?ids={ids}&format=csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    header = rows[0]
    assert header[:6] == ["id", "name", "experiment", "tags", "status", "duration_seconds"]
    assert "hp.lr" in header and "loss.last" in header and "accuracy.best" in header
    assert [row[0] for row in rows[1:]] == [job.pk for job in jobs]
    assert rows[1][header.index("hp.lr")] == "0.1" and rows[3][header.index("hp.amp")] == "true"
    assert rows[1][header.index("accuracy.best")] == "0.8" and rows[2][header.index("accuracy.best")] == ""
    assert rows[2][header.index("tags")] == "'=cmd()", "a cell a spreadsheet would run is quoted"


def test_compare_refuses_another_tenants_job_as_not_found() -> None:
    user, jobs = compare_setup()
    foreign = make_job(make_tenant())
    client = api(user)
    for ids in (f"{jobs[0].pk},{foreign.pk}", f"{jobs[0].pk},nosuchjob"):
        for suffix in ("", "&format=csv"):
            response = client.get(f"/api/v1/jobs/compare/?ids={ids}{suffix}")
            assert response.status_code == 404, (ids, suffix)
            assert response.json()["detail"].startswith("no such job")
    assert foreign.pk not in client.get(f"/api/v1/jobs/compare/?ids={foreign.pk}").json()["detail"].replace(
        f"no such job: {foreign.pk}", ""
    )
    assert Client().get(f"/api/v1/jobs/compare/?ids={jobs[0].pk}").status_code in (401, 403)


@pytest.mark.parametrize(
    ("query", "field", "fragment"),
    [
        ("", "ids", "required"),
        ("ids=" + ",".join(f"j{i}" for i in range(11)), "ids", "at most 10"),
        ("ids=a%00b", "ids", "NUL"),
        ("ids=a/b", "ids", "not a job id"),
        ("ids=abc&points=5", "points", "between 10 and 5000"),
    ],
)
def test_compare_bad_input_is_400(query: str, field: str, fragment: str) -> None:
    response = api(member(make_tenant())).get(f"/api/v1/jobs/compare/?{query}")
    assert response.status_code == 400, response.content
    assert fragment in " ".join(response.json()["errors"][field])
