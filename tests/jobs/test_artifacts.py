"""Code archives in, result files out: upload checks, storage once per tenant, the per-attempt token the
pods present, and the REST endpoints users download from (docs/artifacts.md). Real PostgreSQL; the
artifact store is a local folder per test."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from typing import Any

import boto3
import pytest
from django.core import signing
from django.test import Client

from jobs.artifacts.code import CodeRejected, inspect_code_zip, zip_directory_bytes
from jobs.artifacts.tokens import HEADER, SALT, mint_token
from jobs.core.states import JobStatus
from jobs.models import CodeArchive, Job, JobEvent, ResultFile
from jobs.services import job_retry, job_submit
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = "name: with-code\nimage: python:3.11\ncommand: [python, train.py]\n"
CODE = zip_directory_bytes({"train.py": b"print('hello')\n", "lib/util.py": b"X = 1\n"})


@pytest.fixture(autouse=True)
def artifact_folder(settings: Any, tmp_path: Any) -> Any:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }
    return tmp_path / "artifacts"


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def zip_with(name: str, content: bytes = b"x", *, mode: int | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        archive.writestr(info, content)
    return buffer.getvalue()


# -- checking uploads --------------------------------------------------------------------------------------


def test_a_good_zip_is_described_by_its_hash_size_and_entries() -> None:
    info = inspect_code_zip(CODE)
    assert info.sha256 == hashlib.sha256(CODE).hexdigest()
    assert (info.size, info.entries, info.unpacked_size) == (len(CODE), 2, len("print('hello')\n") + 6)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "is empty"),
        (b"PK\x03\x04 not really a zip", "not a readable ZIP"),
        (b"just text", "not a readable ZIP"),
        (zip_with("../escape.py"), "outside the code folder"),
        (zip_with("a/../../escape.py"), "outside the code folder"),
        (zip_with("/etc/passwd"), "absolute path"),
        (zip_with("C:/windows.py"), "absolute path"),
        (zip_with("link", b"/etc/passwd", mode=stat.S_IFLNK | 0o777), "symbolic link"),
    ],
)
def test_bad_archives_are_refused_with_a_reason(data: bytes, fragment: str) -> None:
    with pytest.raises(CodeRejected, match=fragment):
        inspect_code_zip(data)


def test_size_entry_and_unpacked_limits(settings: Any) -> None:
    settings.CODE_MAX_BYTES = len(CODE) - 1
    with pytest.raises(CodeRejected, match="at most"):
        inspect_code_zip(CODE)
    settings.CODE_MAX_BYTES = 10**9
    settings.CODE_MAX_ENTRIES = 1
    with pytest.raises(CodeRejected, match="2 entries; at most 1"):
        inspect_code_zip(CODE)
    settings.CODE_MAX_ENTRIES = 100
    bomb = zip_directory_bytes({"zeros.bin": b"\0" * 5_000_000})
    assert len(bomb) < 10_000
    settings.CODE_MAX_UNPACKED_BYTES = 1_000_000
    with pytest.raises(CodeRejected, match="would unpack to more than 1000000 bytes"):
        inspect_code_zip(bomb)


# -- submitting with code ----------------------------------------------------------------------------------


def submit_form(user: Any, tenant: Any, code: bytes | None, **extra: Any) -> Any:
    form: dict[str, Any] = {"spec": SPEC, "tenant": tenant.slug, **extra}
    if code is not None:
        form["code"] = io.BytesIO(code)
        form["code"].name = "model.zip"
    return api(user).post("/api/v1/jobs/", form)


def test_submit_with_code_stores_it_once_per_tenant_and_the_job_points_at_it(artifact_folder: Any) -> None:
    tenant = make_tenant()
    user = member(tenant)
    first, second = (submit_form(user, tenant, CODE) for _ in range(2))
    assert first.status_code == second.status_code == 201, first.content
    body = first.json()
    assert body["code"] == {"sha256": hashlib.sha256(CODE).hexdigest(), "size": len(CODE), "entries": 2}
    assert CodeArchive.objects.count() == 1
    archive = CodeArchive.objects.get()
    assert (artifact_folder / archive.storage_name).read_bytes() == CODE
    assert set(Job.objects.values_list("code", flat=True)) == {archive.pk}
    # Another tenant's identical upload is its own archive: nothing is shared across tenants.
    other = make_tenant()
    assert submit_form(member(other), other, CODE).status_code == 201
    assert CodeArchive.objects.count() == 2
    # A retry runs the same code.
    job = Job.objects.filter(tenant=tenant).first()
    assert job is not None
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    job.refresh_from_db()
    assert job_retry(job=job, user=user).code == archive


def test_a_bad_code_archive_is_a_field_error_and_nothing_is_stored(artifact_folder: Any) -> None:
    tenant = make_tenant()
    response = submit_form(member(tenant), tenant, zip_with("../../evil.py"))
    assert response.status_code == 400
    assert "outside the code folder" in response.json()["errors"]["code"][0]
    assert not Job.objects.exists() and not CodeArchive.objects.exists()
    assert not artifact_folder.exists() or not any(artifact_folder.rglob("*.zip"))


def test_a_form_without_a_spec_or_with_unknown_fields_is_refused() -> None:
    tenant = make_tenant()
    user = member(tenant)
    missing = api(user).post("/api/v1/jobs/", {"tenant": tenant.slug})
    assert missing.status_code == 400 and "spec" in missing.json()["errors"]
    unknown = submit_form(user, tenant, None, colour="red")
    assert unknown.status_code == 400 and "colour" in unknown.json()["errors"]
    assert not Job.objects.exists()


def test_a_full_queue_stores_no_code(settings: Any) -> None:
    tenant = make_tenant(max_queued_jobs=0)
    response = submit_form(member(tenant), tenant, CODE)
    assert response.status_code == 429
    assert not CodeArchive.objects.exists()


# -- what pods call ----------------------------------------------------------------------------------------


def running_job_with_code(**fields: Any) -> Job:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC, code=CODE)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1, **fields)
    job.refresh_from_db()
    return job


def pod(token: str | None) -> Client:
    return Client(headers={HEADER: token} if token else {})


def test_the_attempts_token_fetches_its_code_and_nothing_else() -> None:
    job = running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    response = pod(token).get(f"/api/v1/artifacts/{job.pk}/1/code")
    assert response.status_code == 200
    assert response.getvalue() == CODE
    assert response["X-Trainyard-Sha256"] == hashlib.sha256(CODE).hexdigest()

    other = running_job_with_code()
    assert pod(token).get(f"/api/v1/artifacts/{other.pk}/1/code").status_code == 403
    assert pod(token).get(f"/api/v1/artifacts/{job.pk}/2/code").status_code == 403
    assert pod(None).get(f"/api/v1/artifacts/{job.pk}/1/code").status_code == 403
    assert pod(token + "x").get(f"/api/v1/artifacts/{job.pk}/1/code").status_code == 403
    forged = signing.dumps({"j": job.pk, "a": 1, "s": ["code:read"]}, salt=SALT, key="not-the-key")
    assert pod(forged).get(f"/api/v1/artifacts/{job.pk}/1/code").status_code == 403


def test_a_token_is_worthless_once_its_attempt_is_over(settings: Any) -> None:
    job = running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    Job.objects.filter(pk=job.pk).update(attempt=2, status=JobStatus.STARTING)
    refused = pod(token).get(f"/api/v1/artifacts/{job.pk}/1/code")
    assert refused.status_code == 403 and "attempt is over" in refused.json()["detail"]
    settings.ARTIFACT_CODE_TOKEN_SECONDS = -1
    fresh = mint_token(job_id=job.pk, attempt=2)
    assert "expired" in pod(fresh).get(f"/api/v1/artifacts/{job.pk}/2/code").json()["detail"]


def upload(token: str, job: Job, path: str, data: bytes, sha: str | None = None, learner: int = 0) -> Any:
    headers = {HEADER: token, "X-Trainyard-Sha256": sha or hashlib.sha256(data).hexdigest()}
    return Client(headers=headers).put(
        f"/api/v1/artifacts/{job.pk}/1/{learner}/results/files/{path}",
        data,
        content_type="application/octet-stream",
    )


def _pod_writes(token: str, target: Job, attempt: int) -> list[int]:
    """The answers to a pod's three writes (a result file, a TensorBoard piece, the end report)."""
    as_pod = Client(headers={HEADER: token, "X-Trainyard-Sha256": hashlib.sha256(b"forged").hexdigest()})
    base = f"/api/v1/artifacts/{target.pk}/{attempt}/0"
    octets = "application/octet-stream"
    return [
        as_pod.put(f"{base}/results/files/model.txt", b"forged", content_type=octets).status_code,
        as_pod.put(
            f"{base}/tensorboard/files/events.out.tfevents.1",
            b"forged",
            content_type=octets,
            HTTP_X_TRAINYARD_OFFSET="0",
        ).status_code,
        as_pod.post(
            f"{base}/results/complete",
            {"exit_code": 0, "files": 1, "bytes": 6, "checkpoint_bytes": 0},
            content_type="application/json",
        ).status_code,
    ]


def test_an_attempts_token_writes_nothing_of_another_job_or_attempt() -> None:
    job, other = running_job_with_code(), running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    assert _pod_writes(token, other, 1) == [403, 403, 403], (
        "another job's results, event files and end report"
    )
    assert pod(token).get(f"/api/v1/artifacts/{other.pk}/1/code").status_code == 403
    Job.objects.filter(pk=job.pk).update(attempt=2)
    assert _pod_writes(token, job, 2) == [403, 403, 403], "the next attempt of its own job"
    assert _pod_writes(token, job, 1) == [403, 403, 403], "its own attempt once it is over"
    assert not ResultFile.objects.exists()
    assert not JobEvent.objects.filter(kind="results").exists()
    own = mint_token(job_id=job.pk, attempt=2)
    assert _pod_writes(own, job, 2) == [201, 201, 200], "while an attempt's own token writes its own"


def test_result_uploads_are_stored_checked_and_listed_for_the_owner_to_download() -> None:
    job = running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    model = bytes(range(256)) * 1000
    assert upload(token, job, "model.pt", model).status_code == 201
    assert upload(token, job, "logs/train.csv", b"step,loss\n1,0.5\n").status_code == 201
    assert upload(token, job, "model.pt", model).status_code == 201, "a repeated upload replaces the file"
    damaged = upload(token, job, "bad.bin", b"abc", sha="0" * 64)
    assert damaged.status_code == 400 and "damaged" in damaged.json()["detail"]
    for bad in ("../../etc/passwd", "a/../../b", "%2Fabs"):
        assert upload(token, job, bad, b"x").status_code in (400, 404), bad
    assert upload(token, job, "x.bin", b"x", learner=5).status_code == 400
    complete = Client(headers={HEADER: token}).post(
        f"/api/v1/artifacts/{job.pk}/1/0/results/complete",
        {"exit_code": 0, "files": 2, "bytes": len(model) + 16, "checkpoint_bytes": 4096},
        content_type="application/json",
    )
    assert complete.status_code == 200
    job.refresh_from_db()
    assert job.checkpoint_bytes == 4096
    assert JobEvent.objects.get(job=job, kind="results").data["files"] == 2
    assert sorted(ResultFile.objects.filter(job=job).values_list("path", flat=True)) == [
        "logs/train.csv",
        "model.pt",
    ]

    owner = api(job.owner)
    listed = owner.get(f"/api/v1/jobs/{job.pk}/results/").json()
    assert listed["count"] == 2 and listed["next"] is None
    assert [(f["path"], f["size"]) for f in listed["results"]] == [
        ("logs/train.csv", 16),
        ("model.pt", len(model)),
    ]
    one = owner.get(f"/api/v1/jobs/{job.pk}/results/model.pt")
    assert one.status_code == 200 and one.getvalue() == model
    everything = owner.get(f"/api/v1/jobs/{job.pk}/results.zip")
    with zipfile.ZipFile(io.BytesIO(everything.getvalue())) as archive:
        assert archive.read("model.pt") == model and archive.namelist() == ["logs/train.csv", "model.pt"]
    code = owner.get(f"/api/v1/jobs/{job.pk}/code/")
    assert code.getvalue() == CODE
    assert owner.get(f"/api/v1/jobs/{job.pk}/results/missing.pt").status_code == 404


def test_a_bad_completion_report_is_refused() -> None:
    job = running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    client = Client(headers={HEADER: token})
    url = f"/api/v1/artifacts/{job.pk}/1/0/results/complete"
    assert client.post(url, "not json", content_type="application/json").status_code == 400
    assert client.post(url, {"exit_code": "zero"}, content_type="application/json").status_code == 400
    assert not JobEvent.objects.filter(job=job, kind="results").exists()


# -- deleting a job takes its artifacts along ----------------------------------------------------------------


def test_deleting_a_finished_job_removes_its_files_and_unshared_code(
    artifact_folder: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    claims: list[str] = []

    def delete_checkpoints(job: Job) -> bool:
        claims.append(job.pk)
        return True

    monkeypatch.setattr("jobs.cluster.delete_checkpoints", delete_checkpoints)
    job = running_job_with_code()
    assert job.owner is not None
    twin = job_submit(tenant=job.tenant, user=job.owner, document=SPEC, code=CODE)
    token = mint_token(job_id=job.pk, attempt=1)
    assert upload(token, job, "model.pt", b"weights").status_code == 201
    stored = {p.relative_to(artifact_folder).as_posix() for p in artifact_folder.rglob("*") if p.is_file()}
    assert len(stored) == 2  # the code (once for both jobs) and the model

    client = api(job.owner)
    refused = client.delete(f"/api/v1/jobs/{job.pk}/")
    assert refused.status_code == 409 and "cancel it first" in refused.json()["detail"]
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    assert api(member(job.tenant, "viewer")).delete(f"/api/v1/jobs/{job.pk}/").status_code == 403
    other = make_tenant()
    assert api(member(other, "owner")).delete(f"/api/v1/jobs/{job.pk}/").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"/api/v1/jobs/{job.pk}/").status_code == 204
    assert claims == [job.pk] and not Job.objects.filter(pk=job.pk).exists()
    assert not ResultFile.objects.exists() and CodeArchive.objects.count() == 1, (
        "the twin still runs that code"
    )
    assert [p.name for p in artifact_folder.rglob("*") if p.is_file()] == [
        f"{CodeArchive.objects.get().sha256}.zip"
    ]

    Job.objects.filter(pk=twin.pk).update(status=JobStatus.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"/api/v1/jobs/{twin.pk}/").status_code == 204
    assert not CodeArchive.objects.exists() and not any(p.is_file() for p in artifact_folder.rglob("*"))


def test_a_job_is_not_deleted_while_the_cluster_cannot_drop_its_checkpoints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clusterio.errors import Unavailable

    def unreachable(job: Job) -> bool:
        raise Unavailable("connection refused")

    monkeypatch.setattr("jobs.cluster.delete_checkpoints", unreachable)
    job = running_job_with_code()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    response = api(job.owner).delete(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 503 and "checkpoints" in response.json()["detail"]
    assert Job.objects.filter(pk=job.pk).exists() and CodeArchive.objects.exists()


# -- the S3 artifact store (moto's server mode: a real S3 HTTP API) --------------------------------------------


def test_code_and_results_round_trip_through_an_s3_artifact_store(settings: Any, s3_server: str) -> None:
    boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
    ).create_bucket(Bucket="artifacts")
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": "artifacts",
            "endpoint_url": s3_server,
            "region_name": "us-east-1",
            "access_key": "k",
            "secret_key": "s",
            "file_overwrite": True,
        },
    }
    job = running_job_with_code()
    token = mint_token(job_id=job.pk, attempt=1)
    fetched = pod(token).get(f"/api/v1/artifacts/{job.pk}/1/code")
    assert fetched.status_code == 200 and fetched.getvalue() == CODE
    model = bytes(range(256)) * 4096
    assert upload(token, job, "model.pt", model).status_code == 201
    assert upload(token, job, "model.pt", model[:10]).status_code == 201, "a re-upload replaces the object"
    owner = api(job.owner)
    assert owner.get(f"/api/v1/jobs/{job.pk}/results/model.pt").getvalue() == model[:10]
    # A file past boto3's multipart threshold (8 MiB) goes up in parts, read from the request as it streams.
    large = os.urandom(9 * 1024 * 1024)
    assert upload(token, job, "large.bin", large).status_code == 201
    assert owner.get(f"/api/v1/jobs/{job.pk}/results/large.bin").getvalue() == large
    keys = sorted(
        o["Key"]
        for o in boto3.client(
            "s3",
            endpoint_url=s3_server,
            aws_access_key_id="k",
            aws_secret_access_key="s",
            region_name="us-east-1",
        ).list_objects_v2(Bucket="artifacts")["Contents"]
    )
    # The re-upload went to a name of its own and the object it replaced is gone.
    stored = ResultFile.objects.get(job=job, path="model.pt").storage_name
    assert stored.startswith(f"results/{job.tenant.slug}/{job.pk}/1/0/model.pt")
    large_name = ResultFile.objects.get(job=job, path="large.bin").storage_name
    assert keys == sorted([f"code/{job.tenant.slug}/{job.code.sha256}.zip", stored, large_name])
