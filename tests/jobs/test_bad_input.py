"""Inputs that used to answer 500 (issue 14.4) now get a 4xx with a field-level message, and nothing is
stored: odd types inside FfDL manifests and metric groups, JSON nested a thousand levels deep, non-ASCII
digits in query strings, and numbers in a pod's completion report that no column can hold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from common.parsers import MAX_JSON_DEPTH, json_too_deep
from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.metricparse import parse_metric_line
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from tests.factories import make_tenant, member
from tests.jobs.test_ffdl import MANIFEST
from tests.jobs.test_spec import spec_with

pytestmark = pytest.mark.django_db


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(document: Any) -> tuple[int, dict[str, Any]]:
    tenant = make_tenant()
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", document, content_type="application/json"
    )
    return response.status_code, response.json()


@pytest.mark.parametrize("store_type", [["mount_cos"], {"a": 1}, 7])
def test_an_ffdl_data_store_type_that_is_not_a_string_is_a_field_error(store_type: Any) -> None:
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["data_stores"][0]["type"] = store_type
    code, body = submit({"spec": json.dumps(manifest)})
    assert code == 400, body
    assert any("data_stores" in field and field.endswith("type") for field in body["errors"]), body
    assert not Job.objects.exists()


@pytest.mark.parametrize("step", [["iteration"], {"a": "b"}, 3])
def test_a_metric_step_that_is_not_a_capture_name_is_a_field_error(step: Any) -> None:
    metrics = {
        "type": "regex_extractor",
        "groups": {"train": {"regex": r"it (?P<iteration>\d+) loss (?P<loss>\S+)", "meta": {"time": step}}},
    }
    code, body = submit({"spec": json.dumps(spec_with(evaluation_metrics=metrics))})
    assert code == 400, body
    assert body["errors"]["evaluation_metrics.groups.train.meta.time"] == ["must be the name of a capture"]
    assert not Job.objects.exists()


def test_json_nested_a_thousand_levels_is_a_400_not_a_crash() -> None:
    tenant = make_tenant()
    deep = "[" * 5000 + "]" * 5000
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", deep, content_type="application/json"
    )
    assert response.status_code == 400
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in response.json()["detail"]
    token = api(member(tenant)).post(
        "/api/v1/tokens/", '{"name": ' + deep + "}", content_type="application/json"
    )
    assert token.status_code == 400
    assert not Job.objects.exists()


def test_the_depth_check_ignores_brackets_inside_strings() -> None:
    inside = json.dumps({"text": "[" * 500 + "{" * 500})
    assert not json_too_deep(inside.encode())
    assert json_too_deep(("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)).encode())
    assert not json_too_deep(("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH).encode())
    escaped = json.dumps({"t": '\\"' + "[" * 200})
    assert not json_too_deep(escaped.encode()), "an escaped quote does not end the string"


def test_a_log_line_nested_too_deeply_is_not_a_metric_and_breaks_nothing() -> None:
    assert parse_metric_line('{"a": ' + "[" * 3000 + "]" * 3000 + "}") == []


@pytest.mark.parametrize("attempt", ["²", "\u0661", "1e3", "-1", "9999999999"])
def test_a_results_attempt_that_is_not_ascii_digits_is_a_field_error(attempt: str) -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document="name: x\nimage: python:3.11\ncommand: [python]\n")
    for path in (f"/api/v1/jobs/{job.pk}/results/", f"/api/v1/jobs/{job.pk}/results.zip"):
        response = api(user).get(path, {"attempt": attempt})
        assert response.status_code == 400, (path, response.content)
        assert response.json()["errors"] == {"attempt": ["must be a whole number"]}


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"checkpoint_bytes": 10**30}, "checkpoint_bytes must be a whole number from 0 to"),
        ({"checkpoint_bytes": -5}, "checkpoint_bytes must be a whole number from 0 to"),
        ({"checkpoint_bytes": 1e30}, "checkpoint_bytes must be a whole number"),
        ({"bytes": 2**63}, "bytes must be a whole number from 0 to"),
        ({"exit_code": 2**40}, "exit_code must be a whole number from"),
        ({"files": True}, "files must be a whole number"),
    ],
)
def test_a_completion_report_with_numbers_out_of_range_is_refused_and_stores_nothing(
    report: dict[str, Any], message: str
) -> None:
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document="name: x\nimage: python:3.11\ncommand: [python]\n"
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    client = Client(headers={HEADER: mint_token(job_id=job.pk, attempt=1)})
    response = client.post(
        f"/api/v1/artifacts/{job.pk}/1/0/results/complete",
        json.dumps(report),
        content_type="application/json",
    )
    assert response.status_code == 400 and message in response.json()["detail"], response.content
    job.refresh_from_db()
    assert job.checkpoint_bytes is None or job.checkpoint_bytes >= 0
    assert not JobEvent.objects.filter(job=job, kind="results").exists()


@pytest.mark.parametrize("artifacts_base_url", ["", "http://127.0.0.1:8000"])
@pytest.mark.parametrize(
    ("folder", "owner"), [("/scratch", "scratch space"), ("/trainyard/model", "code (MODEL_DIR)")]
)
def test_a_checkpoint_dir_on_a_platform_mount_is_a_field_error_naming_it(
    settings: Any, artifacts_base_url: str, folder: str, owner: str
) -> None:
    settings.ARTIFACTS_BASE_URL = artifacts_base_url
    code, body = submit({"spec": json.dumps(spec_with(checkpoint_dir=folder))})
    assert code == 400, body
    [message] = body["errors"]["checkpoint_dir"]
    assert message.startswith(f"{folder} is where the platform mounts") and owner in message, message
    assert not Job.objects.exists()


def test_a_checkpoint_dir_below_a_platform_mount_is_accepted() -> None:
    code, body = submit({"spec": json.dumps(spec_with(checkpoint_dir="/scratch/ckpt"))})
    assert code == 201, body


@pytest.mark.parametrize("button", ["dry_run", "submit"])
def test_the_submit_page_shows_a_checkpoint_dir_on_a_platform_mount_as_a_field_error(button: str) -> None:
    tenant = make_tenant()
    form = {"tenant": tenant.slug, "spec": json.dumps(spec_with(checkpoint_dir="/scratch")), button: "1"}
    response = api(member(tenant)).post("/jobs/new/", form)
    assert response.status_code == 400
    assert "/scratch is where the platform mounts" in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/x-www-form-urlencoded", "text/yaml"]
)
def test_a_body_over_the_upload_limit_is_a_json_413_in_the_api_error_shape(content_type: str) -> None:
    tenant = make_tenant()
    big = "x" * (3 * 1024 * 1024)
    data = {"application/json": json.dumps({"spec": big}), "text/yaml": f"name: {big}\n"}.get(
        content_type, f"spec={big}"
    )
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", data, content_type=content_type
    )
    assert response.status_code == 413, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert "larger than the 2621440-byte limit" in body["detail"] and list(body["errors"]) == [""]
    assert not Job.objects.exists()


def test_a_form_body_over_the_upload_limit_is_a_json_413_on_other_api_routes_too(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    form = "name=" + "x" * 2000
    client = api(member(make_tenant()))
    response = client.post("/api/v1/tokens/", form, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413 and "larger than the 1000-byte limit" in response.json()["detail"]


def test_a_pod_report_over_the_upload_limit_is_a_json_413_too(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document="name: x\nimage: python:3.11\ncommand: [python]\n"
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    client = Client(headers={HEADER: mint_token(job_id=job.pk, attempt=1)})
    response = client.post(
        f"/api/v1/artifacts/{job.pk}/1/0/results/complete",
        json.dumps({"files": 1, "pad": "x" * 2000}),
        content_type="application/json",
    )
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    assert "larger than the 1000-byte limit" in response.json()["detail"]


def test_a_page_given_a_body_over_the_upload_limit_keeps_an_html_error(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    tenant = make_tenant()
    response = api(member(tenant)).post("/jobs/new/", {"tenant": tenant.slug, "spec": "x" * 2000})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
