"""FfDL's REST API on Trainyard (jobs/ffdl_api), driven with the requests FfDL's CLI sends: basic auth
(`DLAAS_USERNAME`:`DLAAS_PASSWORD`), its `X-Watson-Userinfo` header, `?version=`, and the multipart parts
`manifest` and `model_definition`. Bad input is FfDL's error shape with a 4xx and nothing stored; another
tenant's model is a 404; Trainyard's states read as FfDL's."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from jobs.artifacts.code import zip_directory_bytes
from jobs.core.choices import JobStatus
from jobs.core.ffdl_status import FFDL_STATUS, FfdlStatus, ffdl_status
from jobs.models import CodeArchive, Job, LogLine, MetricSample
from tenants.tokens import token_create
from tests.conftest import FFDL_MANIFESTS
from tests.factories import FFDL_S3_HOST, allow, make_job, make_tenant, member

pytestmark = pytest.mark.django_db

MANIFEST = b"""
name: ffdl-api-model
version: "1.0"
description: a tiny model
cpus: 0.5
memory: 256MiB
learners: 1
framework:
  name: custom
  version: "python:3.11"
  command: python train.py
"""
CODE = zip_directory_bytes({"train.py": b"print('hello from the zip')\n"})
V = "?version=2017-02-13"


@pytest.fixture(autouse=True)
def artifact_folder(settings: Any, tmp_path: Any) -> None:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }


def cli_headers(login: str, token: str) -> dict[str, Any]:
    """What FfDL's CLI puts on every request (cli/cmd/common.go: basic auth and X-Watson-Userinfo)."""
    basic = base64.b64encode(f"{login}:{token}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {basic}", "HTTP_X_WATSON_USERINFO": f"bluemix-instance-id={login}"}


def login(tenant_slug: str | None = None) -> tuple[Any, str, dict[str, Any]]:
    tenant = make_tenant() if tenant_slug is None else make_tenant(tenant_slug)
    user = member(tenant)
    _, token = token_create(user=user, name="ffdl")
    return tenant, token, cli_headers(tenant.slug, token)


def submit(headers: dict[str, Any], manifest: bytes = MANIFEST, code: bytes | None = CODE) -> Any:
    parts: dict[str, Any] = {"manifest": SimpleUploadedFile("manifest.yml", manifest)}
    if code is not None:
        parts["model_definition"] = SimpleUploadedFile("model.zip", code)
    return Client().post("/ffdl/v1/models" + V, parts, **headers)


def test_every_trainyard_state_reads_as_an_ffdl_state() -> None:
    assert set(FFDL_STATUS) == set(JobStatus)
    assert ffdl_status(JobStatus.QUEUED) == FfdlStatus.PENDING
    assert ffdl_status(JobStatus.STARTING) == FfdlStatus.DOWNLOADING
    assert ffdl_status(JobStatus.RUNNING) == FfdlStatus.PROCESSING
    assert ffdl_status(JobStatus.HALTED) == FfdlStatus.HALTED
    assert ffdl_status(JobStatus.SUCCEEDED) == FfdlStatus.COMPLETED
    assert ffdl_status(JobStatus.FAILED) == FfdlStatus.FAILED


def test_the_clis_train_request_submits_the_manifest_with_its_code() -> None:
    tenant, _, headers = login()
    response = submit(headers)
    assert response.status_code == 201, response.content
    body = response.json()
    job = Job.objects.get(pk=body["model_id"])
    assert response["Location"] == body["location"] == f"/v1/models/{job.pk}", "the CLI's LocationToID"
    assert job.tenant == tenant and job.source == "ffdl" and job.code is not None
    got = Client().get(f"/ffdl/v1/models/{job.pk}/definition{V}", **headers)
    assert got.status_code == 200 and b"".join(got.streaming_content) == CODE  # type: ignore[attr-defined]


def test_get_model_speaks_ffdls_fields_and_states() -> None:
    _, _, headers = login()
    model_id = submit(headers).json()["model_id"]
    body = Client().get(f"/ffdl/v1/models/{model_id}{V}", **headers).json()
    assert body["model_id"] == model_id and body["name"] == "ffdl-api-model"
    assert body["description"] == "a tiny model"
    assert body["framework"] == {"name": "custom", "version": "python:3.11"}
    training = body["training"]
    assert training["command"] == "python train.py" and training["cpus"] == 0.5
    assert training["memory"] == 256.0 and training["memory_unit"] == "MiB" and training["learners"] == 1
    status = training["training_status"]
    assert status["status"] == "PENDING" and status["trainyard_status"] == "queued"
    assert status["submitted"].isdigit() and status["completed"] == ""
    listed = Client().get("/ffdl/v1/models" + V, **headers).json()["models"]
    assert [m["model_id"] for m in listed] == [model_id]


def test_a_bearer_token_works_and_a_single_tenant_user_needs_no_tenant_name() -> None:
    tenant, token, _ = login()
    bearer: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = submit(bearer)
    assert response.status_code == 201, response.content
    response = submit(cli_headers("not-a-tenant", token))
    assert response.status_code == 201 and Job.objects.filter(tenant=tenant).count() == 2


def test_a_user_of_two_tenants_names_one_by_login_or_header() -> None:
    first, token, _ = login()
    user = first.memberships.get().user
    second = make_tenant()
    from tenants.services import membership_set

    membership_set(tenant=second, user=user, role="member")
    response = submit(cli_headers("somebody", token))
    assert response.status_code == 400 and "tenant" in response.json()["errors"]
    assert submit(cli_headers(second.slug, token)).status_code == 201
    header = cli_headers("somebody", token) | {"HTTP_X_TRAINYARD_TENANT": first.slug}
    assert submit(header).status_code == 201
    unknown = cli_headers("somebody", token) | {"HTTP_X_TRAINYARD_TENANT": "nope"}
    refused = submit(unknown)
    assert refused.status_code == 400 and "X-Trainyard-Tenant" in refused.json()["errors"]["tenant"][0]
    assert [j.tenant for j in Job.objects.order_by("created_at")] == [second, first]


def test_a_viewer_naming_their_tenant_is_refused_not_sent_to_another() -> None:
    own, token, _ = login()
    user = own.memberships.get().user
    watched = make_tenant()
    from tenants.services import membership_set

    membership_set(tenant=watched, user=user, role="viewer")
    refused = submit(cli_headers(watched.slug, token))
    assert refused.status_code == 400 and "does not allow" in refused.json()["errors"]["tenant"][0]
    assert not Job.objects.exists()
    listed = Client().get("/ffdl/v1/models" + V, **cli_headers(watched.slug, token))
    assert listed.status_code == 200, "a viewer may list the tenant's models"


@pytest.mark.parametrize(
    ("manifest", "code", "field"),
    [
        (b"name: x\nframework: {name: custom}\ncpus: lots\n", CODE, "framework.version"),
        (b"", CODE, "manifest"),
        (MANIFEST, b"not a zip", "model_definition"),
    ],
)
def test_bad_input_is_an_ffdl_error_and_stores_nothing(manifest: bytes, code: bytes, field: str) -> None:
    _, _, headers = login()
    response = submit(headers, manifest, code)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == 400 and body["error"] == "Bad Request" and body["description"]
    assert any(key.startswith(field) or key == "code" for key in body["errors"]), body
    assert not Job.objects.exists() and not CodeArchive.objects.exists()


def test_unknown_parts_a_json_body_and_a_bad_version_are_refused() -> None:
    _, _, headers = login()
    extra = {"manifest": SimpleUploadedFile("m.yml", MANIFEST), "data": SimpleUploadedFile("d", b"x")}
    response = Client().post("/ffdl/v1/models" + V, extra, **headers)
    assert response.status_code == 400 and "data" in response.json()["errors"]
    as_json = Client().post(
        "/ffdl/v1/models" + V, {"manifest": "x"}, content_type="application/json", **headers
    )
    assert as_json.status_code == 415 and as_json.json()["code"] == 415
    bad_version = Client().get("/ffdl/v1/models?version=yesterday", **headers)
    assert bad_version.status_code == 400 and "version" in bad_version.json()["errors"]
    assert not Job.objects.exists()


def test_wrong_or_missing_credentials_are_401_in_ffdls_shape() -> None:
    login()
    wrong = Client().get("/ffdl/v1/models" + V, **cli_headers("x", "ty_wrong"))
    assert wrong.status_code == 401 and wrong.json()["code"] == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    garbled = Client().get("/ffdl/v1/models" + V, HTTP_AUTHORIZATION="Basic %%%")
    assert garbled.status_code == 401
    assert Client().get("/ffdl/v1/models" + V).status_code == 401


def test_another_tenants_model_is_404_everywhere() -> None:
    _, _, mine = login()
    _, _, theirs = login()
    model_id = submit(theirs).json()["model_id"]
    client = Client()
    base = f"/ffdl/v1/models/{model_id}"
    for path in ("", "/definition", "/trained_model", "/logs", "/metrics"):
        got = client.get(base + path + V, **mine)
        assert got.status_code == 404 and got.json()["code"] == 404, path
    assert client.get(f"/ffdl/v1/logs/{model_id}/loglines{V}", **mine).status_code == 404
    halt = client.patch(base + V, {"status": "halt"}, content_type="application/json", **mine)
    assert halt.status_code == 404
    assert client.delete(base + V, **mine).status_code == 404
    assert client.get("/ffdl/v1/models" + V, **mine).json() == {"models": []}
    assert Job.objects.get(pk=model_id).status == JobStatus.QUEUED


def test_halt_and_resume_are_patches_of_the_training_status() -> None:
    _, _, headers = login()
    model_id = submit(headers).json()["model_id"]
    client = Client()

    def patch(body: Any) -> Any:
        return client.patch(
            f"/ffdl/v1/models/{model_id}{V}", body, content_type="application/json", **headers
        )

    def status() -> str:
        return str(
            client.get(f"/ffdl/v1/models/{model_id}{V}", **headers).json()["training"]["training_status"][
                "status"
            ]
        )

    conflict = patch({"status": "resume"})
    assert conflict.status_code == 409 and conflict.json()["code"] == 409
    assert patch({"status": "halt"}).json() == {"model_id": model_id}
    assert status() == "HALTED"
    assert patch({"status": "resume"}).status_code == 202 and status() == "PENDING"
    for bad in ({"status": "stop"}, {"status": "halt", "x": 1}, ["halt"]):
        refused = patch(bad)
        assert refused.status_code == 400 and "status" in refused.json()["errors"], bad


def test_delete_cancels_a_waiting_model_first_and_refuses_a_running_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims: list[str] = []

    def delete_checkpoints(job: Job) -> bool:
        claims.append(job.pk)
        return True

    monkeypatch.setattr("jobs.cluster.delete_checkpoints", delete_checkpoints)
    tenant, _, headers = login()
    model_id = submit(headers).json()["model_id"]
    deleted = Client().delete(f"/ffdl/v1/models/{model_id}{V}", **headers)
    assert deleted.status_code == 200 and deleted.json() == {"model_id": model_id}
    assert not Job.objects.filter(pk=model_id).exists() and claims == [model_id]
    owner = tenant.memberships.get().user
    running = make_job(tenant=tenant, owner=owner, status=JobStatus.RUNNING)
    refused = Client().delete(f"/ffdl/v1/models/{running.pk}{V}", **headers)
    assert refused.status_code == 409 and "halt it first" in refused.json()["description"]
    assert Job.objects.filter(pk=running.pk).exists()


def _lines(job: Job, texts: list[str]) -> None:
    now = timezone.now()
    LogLine.objects.bulk_create(
        LogLine(job=job, learner=0, attempt=1, seq=n, ts=now, text=text) for n, text in enumerate(texts, 1)
    )


def test_logs_are_a_text_dump_and_loglines_page_by_position() -> None:
    tenant, _, headers = login()
    job = make_job(tenant=tenant, owner=tenant.memberships.get().user, status=JobStatus.SUCCEEDED)
    _lines(job, [f"line {n}" for n in range(1, 26)])
    client = Client()
    dump = client.get(f"/ffdl/v1/models/{job.pk}/logs{V}", **headers)
    assert dump.status_code == 200 and dump["Content-Type"] == "application/octet-stream"
    text = b"".join(dump.streaming_content).decode()  # type: ignore[attr-defined]
    assert text.splitlines() == [f"line {n}" for n in range(1, 26)]
    followed = client.get(f"/ffdl/v1/models/{job.pk}/logs{V}&follow=true", **headers)
    assert b"".join(followed.streaming_content).decode() == text, "a finished job's follow ends"  # type: ignore[attr-defined]

    def page(query: str) -> list[tuple[str, str]]:
        got = client.get(f"/ffdl/v1/logs/{job.pk}/loglines?version=2017-10-01{query}", **headers)
        assert got.status_code == 200, got.content
        return [(m["meta"]["rindex"], m["line"]) for m in got.json()["models"]]

    assert page("") == [(str(n), f"line {n}") for n in range(1, 11)], "FfDL's default page is 10 lines"
    assert page("&pos=21&pagesize=3") == [("21", "line 21"), ("22", "line 22"), ("23", "line 23")]
    assert page("&pos=-2") == [("24", "line 24"), ("25", "line 25")]
    assert page("&since_time=-1") == [("25", "line 25")]
    bad = client.get(f"/ffdl/v1/logs/{job.pk}/loglines?pagesize=0", **headers)
    assert bad.status_code == 400 and "pagesize" in bad.json()["errors"]
    bad_since = client.get(f"/ffdl/v1/models/{job.pk}/logs?since_time=soon", **headers)
    assert bad_since.status_code == 400 and "since_time" in bad_since.json()["errors"]


def test_a_model_without_results_has_no_trained_model() -> None:
    _, _, headers = login()
    model_id = submit(headers, code=None).json()["model_id"]
    got = Client().get(f"/ffdl/v1/models/{model_id}/trained_model{V}", **headers)
    assert got.status_code == 404 and "no trained model" in got.json()["description"]
    definition = Client().get(f"/ffdl/v1/models/{model_id}/definition{V}", **headers)
    assert definition.status_code == 404


def test_the_trained_model_zip_holds_the_result_files() -> None:
    from jobs.artifacts.storage import artifact_storage
    from jobs.models import ResultFile

    tenant, _, headers = login()
    job = make_job(tenant=tenant, owner=tenant.memberships.get().user, status=JobStatus.SUCCEEDED, attempt=1)
    name = artifact_storage().save(f"results/{job.pk}/model.txt", io.BytesIO(b"weights"))
    ResultFile.objects.create(
        job=job, attempt=1, learner=0, path="model.txt", size=7, sha256="x", storage_name=name
    )
    got = Client().get(f"/ffdl/v1/models/{job.pk}/trained_model{V}", **headers)
    assert got.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(got.streaming_content)))  # type: ignore[attr-defined]
    assert archive.read("model.txt") == b"weights"


@pytest.mark.skipif(not FFDL_MANIFESTS, reason="no FfDL manifests under ../shared/data/ffdl-manifests")
@pytest.mark.parametrize("manifest", FFDL_MANIFESTS, ids=lambda path: path.stem)
def test_ffdls_own_manifests_come_back_as_models_without_credentials(manifest: Any) -> None:
    tenant = allow(make_tenant(gpus=8, cpu_millis=64000, memory_mib=131072), datastore_hosts=[FFDL_S3_HOST])
    _, token = token_create(user=member(tenant), name="ffdl")
    headers = cli_headers(tenant.slug, token)
    text = manifest.read_bytes()
    created = submit(headers, text, CODE)
    assert created.status_code == 201, created.content
    body = Client().get(f"/ffdl/v1/models/{created.json()['model_id']}{V}", **headers).json()
    source = yaml.safe_load(text)
    assert body["name"] == source["name"]
    assert body["framework"] == {
        k: str(v) for k, v in source["framework"].items() if k in ("name", "version")
    }
    stores = source.get("data_stores") or []
    assert [s["data_store_id"] for s in body["data_stores"]] == [s["id"] for s in stores]
    assert body["training"]["input_data"] == [s["id"] for s in stores if "training_data" in s]
    shown = [s["connection"] for s in body["data_stores"]]
    assert shown and all(set(c) <= {"auth_url"} for c in shown), "the endpoint only, never user or password"
    assert all(c["auth_url"] == s["connection"]["auth_url"] for c, s in zip(shown, stores, strict=True))
    assert '"password"' not in json.dumps(body) and '"user_name"' not in json.dumps(body)


def test_metrics_are_ffdl_metric_data_lines_and_the_model_shows_the_latest() -> None:
    tenant, _, headers = login()
    job = make_job(tenant=tenant, owner=tenant.memberships.get().user, status=JobStatus.RUNNING)
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name=name, step=step, value=value, ts=now, log_seq=step)
        for step, (name, value) in enumerate([("loss", 0.9), ("accuracy", 0.5), ("loss", 0.4)], 1)
    )
    got = Client().get(f"/ffdl/v1/models/{job.pk}/metrics{V}", **headers)
    assert got.status_code == 200
    lines = [json.loads(line) for line in b"".join(got.streaming_content).decode().splitlines()]  # type: ignore[attr-defined]
    assert [(m["iteration"], m["Values"]) for m in lines] == [
        (1, {"loss": 0.9}),
        (2, {"accuracy": 0.5}),
        (3, {"loss": 0.4}),
    ]
    assert all(m["type"] == "train" and m["timestamp"].isdigit() for m in lines)
    summary = Client().get(f"/ffdl/v1/models/{job.pk}{V}", **headers).json()["metrics"]
    assert summary == [
        {
            "type": "train",
            "timestamp": lines[-1]["timestamp"],
            "iteration": 3,
            "Values": {"accuracy": 0.5, "loss": 0.4},
        }
    ]
    assert (
        Client()
        .get(f"/ffdl/v1/models/{job.pk}{V}", **headers)
        .json()["training"]["training_status"]["status"]
        == "PROCESSING"
    )


def test_metrics_of_a_long_run_are_all_there_and_the_model_shows_each_metrics_latest() -> None:
    """25,000 points of `acc` before `loss` in name order: nothing stops at 10,000 (issue 28, item 3)."""
    tenant, _, headers = login()
    job = make_job(tenant=tenant, owner=tenant.memberships.get().user, status=JobStatus.RUNNING)
    now = timezone.now()
    points = [("acc", step) for step in range(20_000)] + [("loss", step) for step in range(5_000)]
    MetricSample.objects.bulk_create(
        (
            MetricSample(job=job, learner=0, attempt=1, name=name, step=step, value=step, ts=now, log_seq=i)
            for i, (name, step) in enumerate(points, 1)
        ),
        batch_size=5000,
    )
    got = Client().get(f"/ffdl/v1/models/{job.pk}/metrics{V}", **headers)
    lines = b"".join(got.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 25_000 and json.loads(lines[-1])["Values"] == {"loss": 4999}
    summary = Client().get(f"/ffdl/v1/models/{job.pk}{V}", **headers).json()["metrics"]
    assert summary[0]["Values"] == {"acc": 19999, "loss": 4999}
