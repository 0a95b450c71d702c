"""Caps on what one attempt of a job writes (jobs/services/caps.py), through the endpoints pods call with
their attempt's token: result files by count and bytes, completion reports, TensorBoard bytes and metric rows
(parsed by the worker's task). A write past a cap is a 4xx JSON answer naming the cap and its limit, stores
nothing, and the cap is recorded by one job event; the tenant's policy overrides each default. Also: the
paginated `/results/` listing and the job page's pages of result files. Real PostgreSQL; the artifact store
is a local folder per test."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import AttemptUsage, EventFile, Job, JobEvent, MetricSample, ResultFile
from jobs.services import job_submit
from jobs.tensorboard.tasks import parse
from tenants.models import Policy
from tenants.policy import write_caps
from tests.factories import make_tenant, make_user, member
from tests.jobs.tensorboard_files import write_scalars

pytestmark = pytest.mark.django_db

SPEC = "name: capped\nimage: python:3.11\ncommand: [python, train.py]\nlearners: 2\n"
TB_SPEC = SPEC + "evaluation_metrics: {type: tensorboard, in: runs}\n"
FILE = "events.out.tfevents.1.host.1"


@pytest.fixture(autouse=True)
def artifact_folder(settings: Any, tmp_path: Path) -> Path:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }
    return tmp_path / "artifacts"


def running_job(spec: str = SPEC, tenant: Any = None) -> Job:
    tenant = tenant or make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=spec)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    job.refresh_from_db()
    return job


def pod(job: Job) -> Client:
    return Client(headers={HEADER: mint_token(job_id=job.pk, attempt=1)})


def upload(job: Job, path: str, data: bytes, learner: int = 0) -> Any:
    return pod(job).put(
        f"/api/v1/artifacts/{job.pk}/1/{learner}/results/files/{path}",
        data,
        content_type="application/octet-stream",
        headers={"X-Trainyard-Sha256": hashlib.sha256(data).hexdigest()},
    )


def complete(job: Job, learner: int = 0) -> Any:
    return pod(job).post(
        f"/api/v1/artifacts/{job.pk}/1/{learner}/results/complete",
        {"exit_code": 0, "files": 1, "bytes": 1},
        content_type="application/json",
    )


def send_events(job: Job, data: bytes, offset: int = 0, path: str = FILE, learner: int = 0) -> Any:
    return pod(job).put(
        f"/api/v1/artifacts/{job.pk}/1/{learner}/tensorboard/files/{path}",
        data,
        content_type="application/octet-stream",
        headers={"X-Trainyard-Offset": str(offset), "X-Trainyard-Sha256": hashlib.sha256(data).hexdigest()},
    )


def parse_sent(job: Job) -> int:
    """Run the worker's parse task for each of the job's event files until nothing whole is left."""
    added = 0
    for pk in EventFile.objects.filter(job=job).order_by("pk").values_list("pk", flat=True):
        while True:
            done = parse.apply(args=(pk,)).get()
            added += done["points"]
            if not done["more"]:
                break
    return added


def cap_events(job: Job) -> list[tuple[str, str]]:
    return list(JobEvent.objects.filter(job=job, kind="caps").values_list("reason", "data__cap"))


def stored_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


# -- result files ----------------------------------------------------------------------------------------------


def test_result_files_past_the_attempts_count_cap_are_refused_with_one_event_and_nothing_stored(
    settings: Any, artifact_folder: Path
) -> None:
    settings.RESULT_MAX_FILES = 3
    job = running_job()
    for n, learner in ((0, 0), (1, 0), (2, 1)):
        assert upload(job, f"f{n}.txt", b"x" * 10, learner=learner).status_code == 201
    for n in (3, 4, 5):
        refused = upload(job, f"f{n}.txt", b"y" * 10, learner=n % 2)
        assert refused.status_code == 409
        body = refused.json()
        assert (body["cap"], body["limit"]) == ("result_max_files", 3)
        assert "cap of 3 result files" in body["detail"] and f"f{n}.txt" in body["detail"]
    assert upload(job, "f0.txt", b"z" * 12).status_code == 201, "replacing a stored file adds no file"
    assert sorted(ResultFile.objects.filter(job=job).values_list("path", flat=True)) == [
        "f0.txt",
        "f1.txt",
        "f2.txt",
    ]
    assert len(stored_files(artifact_folder)) == 3
    assert cap_events(job) == [("ResultFilesCapped", "result_max_files")]
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert (usage.result_files, usage.result_bytes) == (3, 32)


def test_result_bytes_past_the_attempts_cap_are_refused_with_one_event_and_nothing_stored(
    settings: Any, artifact_folder: Path
) -> None:
    settings.RESULT_MAX_BYTES = 1000
    job = running_job()
    assert upload(job, "a.bin", b"a" * 600).status_code == 201
    for _ in range(2):
        refused = upload(job, "b.bin", b"b" * 500)
        assert refused.status_code == 413
        assert refused.json()["cap"] == "result_max_bytes" and refused.json()["limit"] == 1000
    assert upload(job, "a.bin", b"a" * 900).status_code == 201, "a replacement counts only its growth"
    assert upload(job, "c.bin", b"c" * 100).status_code == 201, "exactly at the cap is allowed"
    assert upload(job, "d.bin", b"d").status_code == 413
    assert sorted(ResultFile.objects.filter(job=job).values_list("path", "size")) == [
        ("a.bin", 900),
        ("c.bin", 100),
    ]
    assert len(stored_files(artifact_folder)) == 2
    assert cap_events(job) == [("ResultBytesCapped", "result_max_bytes")]


def test_caps_are_per_attempt_and_a_new_attempt_starts_afresh(settings: Any) -> None:
    settings.RESULT_MAX_FILES = 1
    job = running_job()
    assert upload(job, "one.txt", b"1").status_code == 201
    assert upload(job, "two.txt", b"2").status_code == 409
    Job.objects.filter(pk=job.pk).update(attempt=2)
    again = Client(headers={HEADER: mint_token(job_id=job.pk, attempt=2)}).put(
        f"/api/v1/artifacts/{job.pk}/2/0/results/files/two.txt", b"2", content_type="application/octet-stream"
    )
    assert again.status_code == 201


# -- completion reports and other pod-reported events ----------------------------------------------------------


def test_completion_reports_past_the_cap_are_refused_and_recorded_once(settings: Any) -> None:
    settings.POD_REPORTS_MAX = 2
    job = running_job()
    answers = [complete(job, learner=n % 2) for n in range(300)]
    assert [a.status_code for a in answers[:2]] == [200, 200]
    assert {a.status_code for a in answers[2:]} == {409}
    assert answers[2].json()["cap"] == "pod_reports_max" and answers[2].json()["limit"] == 2
    assert JobEvent.objects.filter(job=job, kind="results").count() == 2
    assert cap_events(job) == [("PodReportsCapped", "pod_reports_max")]


def test_a_damaged_event_file_counts_as_a_pod_report(settings: Any, tmp_path: Path) -> None:
    settings.POD_REPORTS_MAX = 1
    job = running_job(TB_SPEC)
    assert complete(job).status_code == 200
    data = bytearray(write_scalars(tmp_path / "w", "loss", [1.0, 2.0]))
    data[-10] ^= 0xFF
    assert send_events(job, bytes(data)).status_code == 201
    parse_sent(job)
    assert EventFile.objects.get(job=job).error, "reading stops at the damage"
    assert not JobEvent.objects.filter(job=job, kind="tensorboard").exists(), "past the cap: no event"
    assert cap_events(job) == [("PodReportsCapped", "pod_reports_max")]


# -- TensorBoard: bytes in the web request, rows on the worker -------------------------------------------------


def test_a_large_piece_is_stored_by_the_web_and_parsed_by_the_worker_within_the_row_cap_per_piece(
    settings: Any, tmp_path: Path
) -> None:
    settings.TENSORBOARD_PIECE_MAX_ROWS = 30
    job = running_job(TB_SPEC)
    data = write_scalars(tmp_path / "w", "loss", [float(i) for i in range(200)])
    answer = send_events(job, data)
    assert answer.status_code == 201 and answer.json()["queued"] is True
    assert not MetricSample.objects.filter(job=job).exists(), "the web request parses nothing"
    assert parse_sent(job) == 30
    assert list(MetricSample.objects.filter(job=job).order_by("step").values_list("step", flat=True)) == list(
        range(30)
    )
    assert cap_events(job) == [("TensorBoardRowsCapped", "tensorboard_piece_max_rows")]
    row = EventFile.objects.get(job=job)
    assert row.parsed == row.size == len(data), "the dropped rows' records are read past, not again"


def test_metric_rows_past_the_attempts_cap_are_dropped_once_and_the_files_no_longer_read(
    settings: Any, tmp_path: Path
) -> None:
    settings.TENSORBOARD_MAX_ROWS = 5
    job = running_job(TB_SPEC)
    first = write_scalars(tmp_path / "a", "loss", [1.0, 2.0, 3.0, 4.0])
    second = write_scalars(tmp_path / "b", "acc", [0.1, 0.2, 0.3])
    assert send_events(job, first).status_code == 201
    assert send_events(job, second, path=f"eval/{FILE}").status_code == 201
    assert parse_sent(job) == 5
    assert MetricSample.objects.filter(job=job).count() == 5
    third = write_scalars(tmp_path / "c", "lr", [0.5])
    assert send_events(job, third, learner=1).status_code == 201
    assert parse_sent(job) == 0
    assert cap_events(job) == [("TensorBoardRowsCapped", "tensorboard_max_rows")]
    assert EventFile.objects.filter(job=job).exclude(error="").count() == 2, (
        "the capped files stop being read"
    )
    assert AttemptUsage.objects.get(job=job, attempt=1).tensorboard_rows == 5


def test_tensorboard_bytes_past_the_attempts_cap_are_refused_with_one_event(
    settings: Any, artifact_folder: Path, django_capture_on_commit_callbacks: Any
) -> None:
    settings.TENSORBOARD_MAX_BYTES = 100
    job = running_job(TB_SPEC)
    assert send_events(job, b"x" * 80).status_code == 201
    for _ in range(2):
        refused = send_events(job, b"y" * 30, offset=80)
        assert refused.status_code == 413 and refused.json()["cap"] == "tensorboard_max_bytes"
    with django_capture_on_commit_callbacks(execute=True):  # the replaced piece goes after the commit
        restarted = send_events(job, b"z" * 90, offset=0)
    assert restarted.status_code == 201, "starting the file again frees its bytes"
    assert send_events(job, b"w" * 10, path=f"b/{FILE}").status_code == 201
    assert EventFile.objects.get(job=job, path=FILE).size == 90
    assert len(stored_files(artifact_folder)) == 2, "the refused pieces and the replaced one are gone"
    assert cap_events(job) == [("TensorBoardBytesCapped", "tensorboard_max_bytes")]


# -- the tenant's policy overrides the defaults ----------------------------------------------------------------


def test_a_tenants_policy_overrides_each_default_and_other_tenants_keep_theirs(
    settings: Any, tmp_path: Path
) -> None:
    settings.RESULT_MAX_FILES = 100
    strict, roomy = make_tenant(), make_tenant()
    Policy.objects.create(
        tenant=strict, result_max_files=1, pod_reports_max=1, tensorboard_piece_max_bytes=64,
        tensorboard_piece_max_rows=2,
    )  # fmt: skip
    Policy.objects.create(tenant=roomy, result_max_bytes=None)
    capped, free = running_job(TB_SPEC, strict), running_job(TB_SPEC, roomy)
    for job in (capped, free):
        assert upload(job, "one.txt", b"1").status_code == 201
        assert complete(job).status_code == 200
    assert upload(capped, "two.txt", b"2").json()["limit"] == 1
    assert upload(free, "two.txt", b"2").status_code == 201
    assert complete(capped).status_code == 409 and complete(free).status_code == 200
    piece = send_events(capped, b"p" * 65)
    assert piece.status_code == 413 and "at most 64 bytes" in piece.json()["detail"]
    data = write_scalars(tmp_path / "w", "loss", [1.0, 2.0, 3.0])
    for job in (capped, free):
        assert send_events(job, data[:60]).status_code == 201
    assert send_events(free, data[60:], offset=60).status_code == 201
    assert parse_sent(free) == 3
    caps = write_caps(strict)
    assert (caps.result_max_files, caps.result_max_bytes) == (1, settings.RESULT_MAX_BYTES)


def test_platform_admins_set_the_caps_through_the_policy_api_with_field_errors_for_bad_values() -> None:
    tenant = make_tenant()
    admin = Client()
    admin.force_login(make_user(is_superuser=True, is_staff=True))
    url = f"/api/v1/tenants/{tenant.slug}/policy/"
    for field, bad in (
        ("result_max_files", -1),
        ("result_max_bytes", "lots"),
        ("pod_reports_max", True),
        ("tensorboard_piece_max_bytes", 0),
        ("tensorboard_piece_max_bytes", 65 * 1024 * 1024),
        ("tensorboard_max_rows", 10**12),
    ):
        answer = admin.patch(url, {field: bad}, content_type="application/json")
        assert answer.status_code == 400 and field in answer.json()["errors"], (field, bad)
    good = {"result_max_files": 10, "tensorboard_max_rows": 1000, "pod_reports_max": 0}
    answer = admin.patch(url, good, content_type="application/json")
    assert answer.status_code == 200 and {k: answer.json()[k] for k in good} == good
    assert write_caps(tenant).result_max_files == 10
    back = admin.patch(url, {"result_max_files": None}, content_type="application/json")
    assert back.json()["result_max_files"] is None
    owner = Client()
    owner.force_login(member(tenant, "owner"))
    refused = owner.patch(url, {"result_max_files": 10**6}, content_type="application/json")
    assert refused.status_code == 403


def test_the_admin_console_policy_form_sets_a_cap_and_refuses_a_bad_one() -> None:
    from tenants.admin import PolicyForm

    tenant = make_tenant()
    policy = Policy.objects.create(tenant=tenant)
    fields = {f: getattr(policy, f) for f in PolicyForm.Meta.fields}
    fields |= {"host_path_prefixes": "[]", "image_registries": "[]", "datastore_hosts": "[]"}
    bad = PolicyForm(data=fields | {"tensorboard_piece_max_bytes": 10**9}, instance=policy)
    assert not bad.is_valid() and "tensorboard_piece_max_bytes" in bad.errors
    good = PolicyForm(data=fields | {"result_max_bytes": 2048}, instance=policy)
    assert good.is_valid(), good.errors
    good.save()
    assert write_caps(tenant).result_max_bytes == 2048


# -- bad input is a 4xx, never a 500 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body", [b"", b"[]", b"{", b'{"exit_code": 1e400}', b'{"files": "x"}', b"\xff\xfe", b"[" * 5000]
)
def test_bad_completion_reports_are_4xx_and_record_nothing(body: bytes) -> None:
    job = running_job()
    answer = pod(job).post(
        f"/api/v1/artifacts/{job.pk}/1/0/results/complete", body, content_type="application/json"
    )
    assert answer.status_code in (200, 400), answer.content
    assert answer.status_code == 200 or not JobEvent.objects.filter(job=job, kind="results").exists()


# -- `/results/` in pages ------------------------------------------------------------------------------------


def test_the_results_listing_is_paginated_and_every_page_reached_by_next() -> None:
    job = running_job()
    for n in range(7):
        assert upload(job, f"out/{n:02d}.txt", b"r" * n, learner=n % 2).status_code == 201
    owner = Client()
    assert job.owner is not None
    owner.force_login(job.owner)
    seen, url = [], f"/api/v1/jobs/{job.pk}/results/?page_size=3"
    while url:
        page = owner.get(url)
        assert page.status_code == 200
        body = page.json()
        assert body["count"] == 7 and len(body["results"]) <= 3
        seen += [(f["learner"], f["path"]) for f in body["results"]]
        url = body["next"]
    assert seen == sorted((n % 2, f"out/{n:02d}.txt") for n in range(7))
    assert owner.get(f"/api/v1/jobs/{job.pk}/results/?page=9").status_code == 404
    assert owner.get(f"/api/v1/jobs/{job.pk}/results/?page=x").status_code == 404
    big = owner.get(f"/api/v1/jobs/{job.pk}/results/?page_size=100000").json()
    assert len(big["results"]) == 7

    stranger = Client()
    stranger.force_login(member(make_tenant()))
    assert stranger.get(f"/api/v1/jobs/{job.pk}/results/").status_code == 404


def test_the_job_page_shows_result_files_a_page_at_a_time() -> None:
    job = running_job()
    ResultFile.objects.bulk_create(
        ResultFile(job=job, attempt=1, learner=0, path=f"f{n:03d}", size=n, sha256="0" * 64, storage_name="x")
        for n in range(60)
    )
    owner = Client()
    assert job.owner is not None
    owner.force_login(job.owner)
    first = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert "f000" in first and "f049" in first and "f050" not in first
    assert "Page 1 of 2 · 60 files" in first and "?results_page=2" in first
    second = owner.get(f"/jobs/{job.pk}/?results_page=2").content.decode()
    assert "f050" in second and "f049" not in second and f"/jobs/{job.pk}/parts/?results_page=2" in second
    assert owner.get(f"/jobs/{job.pk}/?results_page=zz").status_code == 200
