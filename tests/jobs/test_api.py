"""REST API for jobs: submit in JSON or YAML, field errors with nothing stored, tenant isolation (404),
roles (403), logs by sequence and tail, and bearer tokens."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.throttling import SimpleRateThrottle

from clusterio.capacity import NodeInfo, Resources
from jobs.models import Job, LogLine, MetricSample
from jobs.services import job_submit
from tenants.models import ApiToken
from tenants.tokens import token_create, token_revoke
from tests.conftest import FFDL_MANIFESTS
from tests.factories import FFDL_S3_HOST, allow, make_tenant, member

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


def test_unknown_gpu_type_gives_a_field_error_listing_the_known_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "jobs.cluster.gpu_products", lambda: ["NVIDIA-A100-SXM4-80GB", "nvidia-l4", "Tesla-T4"]
    )
    tenant = make_tenant()
    client = api(member(tenant))
    spec = {**SPEC, "resources": {"gpus": 1, "gpu_type": "B300"}}
    response = client.post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "resources.gpu_type": ["no node of the cluster has GPU type B300; known types: A100, L4, T4"]
    }
    assert not Job.objects.exists()
    spec["resources"]["gpu_type"] = "a100"
    response = client.post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
    )
    assert response.status_code == 201 and response.json()["spec"]["resources"]["gpu_type"] == "a100"


@pytest.mark.skipif(not FFDL_MANIFESTS, reason="no FfDL manifests under ../shared/data/ffdl-manifests")
@pytest.mark.parametrize("manifest", FFDL_MANIFESTS, ids=lambda path: path.stem)
def test_submit_an_ffdl_manifest_as_yaml(manifest: Any) -> None:
    tenant = allow(make_tenant(gpus=8, cpu_millis=64000, memory_mib=131072), datastore_hosts=[FFDL_S3_HOST])
    text = manifest.read_text(encoding="utf-8")
    response = api(member(tenant)).post(
        f"/api/v1/jobs/?tenant={tenant.slug}", text, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["source"] == "ffdl" and body["status"] == "queued" and body["tenant"] == tenant.slug
    assert body["name"] and body["spec"]["image"] and body["spec"]["command"]
    assert set(body["resources"]) >= {"learners", "gpus", "cpu_millis", "memory_mib"}
    job = Job.objects.get(pk=body["id"])
    assert job.source == "ffdl"
    assert "password" not in response.content.decode() and "password" not in str(job.spec)


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


@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "events/",
        "logs/",
        "metrics/",
        "telemetry/",
        "results/",
        "results.zip",
        "results/model.pt",
        "code/",
    ],
)
def test_other_tenants_job_is_404_on_every_read(suffix: str) -> None:
    mine, other = make_tenant(), make_tenant()
    job = job_submit(tenant=other, user=member(other), document=SPEC)
    assert api(member(mine, "owner")).get(f"/api/v1/jobs/{job.pk}/{suffix}").status_code == 404
    _, secret = token_create(user=member(mine, "owner"), name="ci")
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    hidden, missing = (bearer.get(f"/api/v1/jobs/{pk}/{suffix}") for pk in (job.pk, "nosuchjob"))
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json() == {"detail": "no such job", "errors": {}}


@pytest.mark.parametrize("action", ["cancel", "retry", "halt", "resume"])
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


def test_halt_and_resume_a_queued_job_with_403_for_viewers_and_409_for_illegal_moves() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    viewer = api(member(tenant, "viewer"))
    assert viewer.post(f"/api/v1/jobs/{job.pk}/halt/").status_code == 403
    refused = api(user).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"only a halted job can be resumed; job {job.pk} is queued"

    response = api(user).post(f"/api/v1/jobs/{job.pk}/halt/")
    assert response.status_code == 200 and response.json()["status"] == "halted"
    assert response.json()["reason"] == "HaltedByUser"
    assert viewer.post(f"/api/v1/jobs/{job.pk}/resume/").status_code == 403
    response = api(user).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert response.status_code == 200 and response.json()["status"] == "requeued"
    assert response.json()["reason"] == "Resumed"
    events = api(user).get(f"/api/v1/jobs/{job.pk}/events/").json()
    moves = [(e["from_status"], e["to_status"], e["reason"]) for e in events if e["kind"] == "transition"]
    assert moves == [("queued", "halted", "HaltedByUser"), ("halted", "requeued", "Resumed")]

    api(user).post(f"/api/v1/jobs/{job.pk}/cancel/")
    finished = api(user).post(f"/api/v1/jobs/{job.pk}/halt/")
    assert finished.status_code == 409 and "cancelled (a final state)" in finished.json()["detail"]


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


def test_a_logs_page_is_what_the_serializer_would_write() -> None:
    """The logs view builds its rows directly (pages of up to 10,000 lines); they equal the serializer's."""
    from jobs.api import LogPageSerializer
    from jobs.selectors import job_logs

    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    _lines(job, 12)
    LogLine.objects.filter(job=job, seq=3).update(ts=timezone.now().replace(microsecond=0))  # no fraction
    LogLine.objects.filter(job=job, seq=4).update(ts=None)  # a line whose container gave no time
    for query in ("learner=0&after=0&limit=100", "tail=5"):
        page = api(user).get(f"/api/v1/jobs/{job.pk}/logs/?{query}").json()
        params = {"learner": 0, "after": 0, "limit": 100} if "limit" in query else {"tail": 5}
        lines = job_logs(job=job, **params)
        expected = LogPageSerializer({"lines": lines, "last_seq": lines[-1].seq}).data
        assert page == {"lines": [dict(line) for line in expected["lines"]], "last_seq": expected["last_seq"]}


def test_events_are_the_jobs_history_in_order() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    api(user).post(f"/api/v1/jobs/{job.pk}/cancel/")
    response = api(user).get(f"/api/v1/jobs/{job.pk}/events/")
    assert response.status_code == 200
    rows = response.json()
    assert rows and all(
        set(row) == {"created_at", "kind", "from_status", "to_status", "reason", "message", "data"}
        for row in rows
    )
    assert [row["created_at"] for row in rows] == sorted(row["created_at"] for row in rows)
    transitions = [(row["from_status"], row["to_status"]) for row in rows if row["to_status"]]
    assert transitions[-1] == ("queued", "cancelled")
    assert "CancelledByUser" in [row["reason"] for row in rows]


def test_metrics_list_every_sample_and_filter_by_name() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name=name, step=step, value=value, ts=now, log_seq=seq)
        for seq, (name, step, value) in enumerate(
            [("loss", 0, 2.5), ("acc", 0, 0.1), ("loss", 1, 1.25), ("acc", 1, 0.5)], start=1
        )
    )
    client = api(user)
    page = client.get(f"/api/v1/jobs/{job.pk}/metrics/").json()
    assert page["next"] is None and page["previous"] is None
    rows = page["results"]
    assert [(row["name"], row["step"]) for row in rows] == [("acc", 0), ("acc", 1), ("loss", 0), ("loss", 1)]
    assert all(set(row) == {"name", "learner", "attempt", "step", "value", "ts", "log_seq"} for row in rows)
    loss = client.get(f"/api/v1/jobs/{job.pk}/metrics/?name=loss").json()["results"]
    assert [(row["step"], row["value"], row["log_seq"]) for row in loss] == [(0, 2.5, 1), (1, 1.25, 3)]
    assert client.get(f"/api/v1/jobs/{job.pk}/metrics/?name=nothing").json()["results"] == []


def test_cluster_lists_each_nodes_allocatable_and_free_room(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [
        NodeInfo("cpu-0", True, None, Resources(0, 8000, 32768), Resources(0, 6000, 30720)),
        NodeInfo("gpu-0", False, "A100", Resources(4, 16000, 65536), Resources(-1, 0, 1024)),
    ]
    monkeypatch.setattr("jobs.cluster.nodes", lambda: list(nodes))
    response = api(member(make_tenant())).get("/api/v1/cluster/")
    assert response.status_code == 200
    assert response.json() == {
        "nodes": [
            {
                "name": "cpu-0",
                "ready": True,
                "gpu_type": None,
                "allocatable": {"gpus": 0, "cpu_millis": 8000, "memory_mib": 32768},
                "free": {"gpus": 0, "cpu_millis": 6000, "memory_mib": 30720},
            },
            {
                "name": "gpu-0",
                "ready": False,
                "gpu_type": "A100",
                "allocatable": {"gpus": 4, "cpu_millis": 16000, "memory_mib": 65536},
                "free": {"gpus": -1, "cpu_millis": 0, "memory_mib": 1024},
            },
        ]
    }


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


@pytest.fixture
def tiny_rates(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Rates of a few requests a minute, from a clean throttle cache. DRF's throttles read their rates
    into a class attribute at import, so override_settings would not reach them: patch that attribute."""
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"anon": "2/minute", "user": "3/minute"})
    cache.clear()
    yield
    cache.clear()


def _assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    body = response.json()
    assert set(body) == {"detail", "errors"} and body["errors"] == {}
    assert "throttled" in body["detail"]
    assert 0 < int(response["Retry-After"]) <= 60


def test_a_user_over_the_rate_gets_429_with_retry_after_and_the_error_shape(tiny_rates: None) -> None:
    tenant = make_tenant()
    client = api(member(tenant))
    assert [client.get("/api/v1/jobs/").status_code for _ in range(3)] == [200, 200, 200]
    _assert_throttled(client.get("/api/v1/jobs/"))
    assert api(member(tenant)).get("/api/v1/jobs/").status_code == 200  # the rate is per user


def test_anonymous_requests_and_bad_tokens_are_throttled_too(tiny_rates: None) -> None:
    anonymous, guesser = Client(), Client(HTTP_AUTHORIZATION="Bearer ty_guess")
    assert anonymous.get("/api/v1/jobs/").status_code == 401
    assert guesser.get("/api/v1/tenants/").status_code == 401
    _assert_throttled(anonymous.get("/api/v1/jobs/"))  # the same client address: the anonymous rate
    _assert_throttled(guesser.get("/api/v1/tenants/"))
    schema = Client().get("/api/schema/")  # open to anyone: the anonymous rate still applies
    assert schema.status_code == 429 and "Retry-After" in schema


def test_jobs_carry_their_eta_and_range_or_why_it_is_unknown() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    other = job_submit(tenant=tenant, user=user, document={**SPEC, "name": "other"})
    start = timezone.now().replace(microsecond=0)
    Job.objects.filter(pk=job.pk).update(eta=start, eta_low=start, eta_high=start)
    Job.objects.filter(pk=other.pk).update(eta_reason="unknown: far back in the queue")
    body = api(user).get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["eta"] == body["eta_low"] == body["eta_high"] == start.isoformat().replace("+00:00", "Z")
    assert body["eta_reason"] == ""
    listed = {j["id"]: j for j in api(user).get("/api/v1/jobs/").json()["results"]}
    assert listed[other.pk]["eta"] is None and listed[other.pk]["eta_reason"].startswith("unknown: far")
