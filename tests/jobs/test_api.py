"""REST API for jobs: submit in JSON or YAML, field errors with nothing stored, tenant isolation (404),
roles (403), logs by sequence and tail, and bearer tokens."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from jobs.models import Job, LogLine
from jobs.services import job_submit
from tenants.models import ApiToken
from tenants.tokens import token_create, token_revoke
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}
YAML = "name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\nresources: {cpu: 2}\n"


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_submit_json_creates_a_queued_job() -> None:
    tenant = make_tenant()
    user = member(tenant)
    response = api(user).post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": SPEC}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued" and body["tenant"] == tenant.slug and body["owner"] == user.username
    assert Job.objects.get(pk=body["id"]).spec["image"] == "pytorch/pytorch:2.3"


def test_submit_raw_yaml_with_tenant_in_query() -> None:
    tenant = make_tenant()
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", YAML, content_type="application/yaml"
    )
    assert response.status_code == 201
    assert response.json()["resources"]["cpu_millis"] == 2000


def test_tenant_may_be_left_out_by_a_member_of_one_tenant() -> None:
    tenant = make_tenant()
    response = api(member(tenant)).post("/api/v1/jobs/", {"spec": YAML}, content_type="application/json")
    assert response.status_code == 201 and response.json()["tenant"] == tenant.slug


def test_bad_spec_gives_field_errors_and_stores_nothing() -> None:
    tenant = make_tenant()
    bad = {**SPEC, "learners": 1.5, "resources": {"gpus": -1}, "colour": "red"}
    response = api(member(tenant)).post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": bad}, content_type="application/json"
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert {"learners", "resources.gpus", "colour"} <= set(errors)
    assert not Job.objects.exists()


def test_broken_yaml_is_a_400_not_a_crash() -> None:
    tenant = make_tenant()
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", "name: [unclosed\n  - :", content_type="text/yaml"
    )
    assert response.status_code == 400 and not Job.objects.exists()


def test_binary_body_is_a_400() -> None:
    tenant = make_tenant()
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", b"\xff\xfe\x00garbage", content_type="application/octet-stream"
    )
    assert response.status_code == 400


def test_job_over_the_quota_is_refused_with_the_reason() -> None:
    tenant = make_tenant(gpus=1)
    spec = {**SPEC, "learners": 2, "resources": {"gpus": 1}}
    response = api(member(tenant)).post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "needs 2 GPUs in all" in response.json()["detail"]


def test_submitting_into_someone_elses_tenant_is_refused() -> None:
    mine, other = make_tenant(), make_tenant()
    response = api(member(mine)).post(
        "/api/v1/jobs/", {"tenant": other.slug, "spec": SPEC}, content_type="application/json"
    )
    assert response.status_code == 400 and "tenant" in response.json()["errors"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("suffix", ["", "events/", "logs/", "metrics/"])
def test_other_tenants_job_is_404_on_every_read(suffix: str) -> None:
    mine, other = make_tenant(), make_tenant()
    job = job_submit(tenant=other, user=member(other), document=SPEC)
    assert api(member(mine, "owner")).get(f"/api/v1/jobs/{job.pk}/{suffix}").status_code == 404


@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_other_tenants_job_is_404_on_actions(action: str) -> None:
    mine, other = make_tenant(), make_tenant()
    job = job_submit(tenant=other, user=member(other), document=SPEC)
    assert api(member(mine, "owner")).post(f"/api/v1/jobs/{job.pk}/{action}/").status_code == 404
    job.refresh_from_db()
    assert job.status == "queued"


def test_list_shows_only_my_tenants_jobs_with_filters() -> None:
    mine, other = make_tenant(), make_tenant()
    user = member(mine)
    mine_job = job_submit(tenant=mine, user=user, document=SPEC)
    job_submit(tenant=other, user=member(other), document=SPEC)
    body = api(user).get("/api/v1/jobs/?status=queued&owner=me").json()
    assert body["count"] == 1 and body["results"][0]["id"] == mine_job.pk
    bad = api(user).get("/api/v1/jobs/?status=nonsense")
    assert bad.status_code == 400
    assert "unknown status" in bad.json()["detail"] and "status" in bad.json()["errors"]


def test_viewer_cannot_cancel_but_the_owner_can() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    job = job_submit(tenant=tenant, user=owner, document=SPEC)
    assert api(member(tenant, "viewer")).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 403
    response = api(owner).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert api(owner).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 409


def test_retry_resubmits_a_finished_job_as_a_new_one() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    assert api(user).post(f"/api/v1/jobs/{job.pk}/retry/").status_code == 409
    api(user).post(f"/api/v1/jobs/{job.pk}/cancel/")
    response = api(user).post(f"/api/v1/jobs/{job.pk}/retry/")
    assert response.status_code == 201 and response.json()["id"] != job.pk


def _lines(job: Job, count: int, learner: int = 0) -> None:
    now = timezone.now()
    LogLine.objects.bulk_create(
        LogLine(job=job, learner=learner, attempt=1, seq=i, ts=now, text=f"line {i}")
        for i in range(1, count + 1)
    )


def test_logs_page_forward_by_sequence_and_tail() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    _lines(job, 30)
    client = api(user)
    page = client.get(f"/api/v1/jobs/{job.pk}/logs/?learner=0&after=10&limit=5").json()
    assert [line["seq"] for line in page["lines"]] == [11, 12, 13, 14, 15] and page["last_seq"] == 15
    tail = client.get(f"/api/v1/jobs/{job.pk}/logs/?tail=3").json()
    assert [line["text"] for line in tail["lines"]] == ["line 28", "line 29", "line 30"]
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/?after=abc").status_code == 400


def test_anonymous_requests_are_refused() -> None:
    assert Client().get("/api/v1/jobs/").status_code in (401, 403)


def test_token_is_shown_once_and_stored_hashed() -> None:
    tenant = make_tenant()
    user = member(tenant)
    response = api(user).post("/api/v1/tokens/", {"name": "laptop"}, content_type="application/json")
    assert response.status_code == 201
    secret = response.json()["token"]
    assert secret.startswith("ty_")
    stored = ApiToken.objects.get(user=user)
    assert secret not in (stored.digest, stored.prefix) and stored.prefix == secret[:10]
    listed = api(user).get("/api/v1/tokens/").json()
    assert "token" not in listed[0] and listed[0]["name"] == "laptop"


def test_bearer_token_authenticates_until_revoked() -> None:
    tenant = make_tenant()
    user = member(tenant)
    token, secret = token_create(user=user, name="ci")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/jobs/").status_code == 200
    token_revoke(token=token)
    assert client.get("/api/v1/jobs/").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer ty_wrong").get("/api/v1/jobs/").status_code == 401


def test_token_of_another_user_cannot_be_revoked() -> None:
    tenant = make_tenant()
    token, _ = token_create(user=member(tenant), name="mine")
    assert api(member(tenant)).delete(f"/api/v1/tokens/{token.pk}/").status_code == 404


def test_cluster_without_configuration_is_a_503_not_a_crash(settings: Any, tmp_path: Any) -> None:
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    tenant = make_tenant()
    response = api(member(tenant)).get("/api/v1/cluster/")
    assert response.status_code == 503 and "cluster unreachable" in response.json()["detail"]
