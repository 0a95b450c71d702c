"""The endpoint launchers send event files to (jobs/artifacts/event_views.py) and the scalars the worker's
parse task stores as metrics (jobs/tensorboard/tasks.py, jobs/services/tensorboard.py): the attempt's token
only, bad input a 4xx with a reason and nothing stored, pieces appended at the right offset, nothing parsed
in the web request, each point once however often a file is sent, and a damaged file a job event. The task
runs in-process here (`apply`, as the engine tests run launch); tests/jobs/test_write_caps.py runs it on a
real worker. Real PostgreSQL; the artifact store is a local folder per test."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import EventFile, Job, JobEvent, MetricSample
from jobs.services import job_submit
from jobs.tensorboard.tasks import parse
from tests.factories import make_tenant, member
from tests.jobs.tensorboard_files import write_scalars

pytestmark = pytest.mark.django_db

SPEC = "name: tb\nimage: python:3.11\ncommand: [python, train.py]\nevaluation_metrics: {type: tensorboard, in: runs}\n"
FILE = "events.out.tfevents.1.host.1"


@pytest.fixture(autouse=True)
def artifact_folder(settings: Any, tmp_path: Path) -> Path:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }
    return tmp_path / "artifacts"


@pytest.fixture
def job() -> Job:
    tenant = make_tenant()
    submitted = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    Job.objects.filter(pk=submitted.pk).update(status=JobStatus.RUNNING, attempt=1)
    submitted.refresh_from_db()
    return submitted


def send(
    job: Job,
    data: bytes,
    offset: int | str | None = 0,
    *,
    path: str = FILE,
    token: str | None = "mint",  # noqa: S107 - "mint" means: mint the attempt's token
    learner: int = 0,
    sha: str | None = None,
) -> Any:
    headers = {"X-Trainyard-Sha256": sha or hashlib.sha256(data).hexdigest()}
    if token:
        headers[HEADER] = mint_token(job_id=job.pk, attempt=1) if token == "mint" else token
    if offset is not None:
        headers["X-Trainyard-Offset"] = str(offset)
    return Client(headers=headers).put(
        f"/api/v1/artifacts/{job.pk}/1/{learner}/tensorboard/files/{path}",
        data,
        content_type="application/octet-stream",
    )


def parse_sent(job: Job) -> int:
    """Run the parse task for each of the job's event files until nothing whole is left; the points added."""
    added = 0
    for pk in EventFile.objects.filter(job=job).values_list("pk", flat=True):
        while True:
            done = parse.apply(args=(pk,)).get()
            added += done["points"]
            if not done["more"]:
                break
    return added


def points(job: Job) -> list[tuple[str, int | None, float]]:
    return list(
        MetricSample.objects.filter(job=job).order_by("name", "step").values_list("name", "step", "value")
    )


def test_a_file_sent_in_pieces_becomes_the_jobs_metrics_once(
    job: Job, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    data = write_scalars(tmp_path / "w", "loss", [1.0, 0.5, 0.25, 0.125])
    cut = 101  # inside a record: its end comes with the second piece
    first = send(job, data[:cut], 0)
    assert first.status_code == 201 and first.json()["size"] == cut
    second = send(job, data[cut:], cut)
    assert second.status_code == 201 and second.json() == {"path": FILE, "size": len(data), "queued": True}
    assert points(job) == [], "the web request parses nothing: the worker does"
    assert parse_sent(job) == 4
    assert points(job) == [("loss", 0, 1.0), ("loss", 1, 0.5), ("loss", 2, 0.25), ("loss", 3, 0.125)]
    row = EventFile.objects.get(job=job)
    assert (row.size, row.parsed, row.error, len(row.chunks)) == (len(data), len(data), "", 2)

    with django_capture_on_commit_callbacks(execute=True):
        again = send(job, data, 0)  # the whole file once more, from its start (a restarted launcher)
    assert again.status_code == 201
    assert parse_sent(job) == 0
    assert len(points(job)) == 4, "no point is stored twice"
    stored = [p.name for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert len(stored) == 1 and stored[0].startswith("000000000000000-"), (
        "the replaced file's pieces are gone"
    )

    api = Client()
    assert job.owner is not None
    api.force_login(job.owner)
    listed = api.get(f"/api/v1/jobs/{job.pk}/metrics/?name=loss").json()["results"]
    assert [(s["step"], s["value"]) for s in listed] == [(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.125)]


def test_a_piece_at_the_wrong_offset_is_a_409_with_the_size_held(job: Job, tmp_path: Path) -> None:
    data = write_scalars(tmp_path / "w", "loss", [1.0, 2.0])
    assert send(job, data[:50], 0).status_code == 201
    conflict = send(job, data[60:], 60)
    assert conflict.status_code == 409 and conflict.json()["size"] == 50
    assert send(job, data[50:], 50).status_code == 201
    assert parse_sent(job) == 2 and len(points(job)) == 2


@pytest.mark.parametrize(
    ("change", "status", "fragment"),
    [
        ({"token": None}, 403, "token"),
        ({"token": "forged"}, 403, "not valid"),
        ({"path": "../escape.tfevents"}, 400, "not a relative path"),
        ({"path": "notes.txt"}, 400, "not a TensorBoard event file"),
        ({"offset": None}, 400, "X-Trainyard-Offset"),
        ({"offset": "-5"}, 400, "X-Trainyard-Offset"),
        ({"offset": "ten"}, 400, "X-Trainyard-Offset"),
        ({"learner": 3}, 400, "no learner 3"),
        ({"sha": "0" * 64}, 400, "damaged"),
    ],
)
def test_bad_uploads_are_refused_with_a_reason_and_store_nothing(
    job: Job, artifact_folder: Path, change: dict[str, Any], status: int, fragment: str
) -> None:
    response = send(job, b"\x00" * 40, **{"offset": 0, **change})
    assert response.status_code == status and fragment in response.json()["detail"]
    assert not EventFile.objects.exists() and not MetricSample.objects.exists()
    assert not [p for p in artifact_folder.rglob("*") if p.is_file()]


def test_size_and_count_limits(job: Job, settings: Any) -> None:
    settings.TENSORBOARD_UPLOAD_MAX_BYTES = 10
    assert send(job, b"x" * 11).status_code == 413
    settings.TENSORBOARD_UPLOAD_MAX_BYTES = 100
    settings.TENSORBOARD_FILE_MAX_BYTES = 15
    assert send(job, b"x" * 10).status_code == 201
    assert send(job, b"x" * 10, 10).status_code == 413
    settings.TENSORBOARD_MAX_FILES = 1
    refused = send(job, b"x" * 5, path="b/events.out.tfevents.2")
    assert refused.status_code == 400 and "already sent 1 event files" in refused.json()["detail"]
    assert EventFile.objects.count() == 1


def test_a_damaged_file_is_a_job_event_and_keeps_the_points_before_the_damage(
    job: Job, tmp_path: Path
) -> None:
    data = bytearray(write_scalars(tmp_path / "w", "loss", [1.0, 2.0, 3.0, 4.0]))
    data[-10] ^= 0xFF  # in the last record
    response = send(job, bytes(data))
    assert response.status_code == 201
    parse_sent(job)
    assert [step for _, step, _ in points(job)] == [0, 1, 2]
    event = JobEvent.objects.get(job=job, kind="tensorboard")
    assert event.reason == "EventFileDamaged" and FILE in event.message
    assert EventFile.objects.get(job=job).error
    assert send(job, b"more", len(data)).status_code == 201, "later pieces are still accepted"
    assert parse_sent(job) == 0
    assert JobEvent.objects.filter(job=job, kind="tensorboard").count() == 1


def test_runs_in_subfolders_prefix_their_metric_names(job: Job, tmp_path: Path) -> None:
    data = write_scalars(tmp_path / "w", "loss", [0.5])
    assert send(job, data, path=f"eval/{FILE}").status_code == 201
    parse_sent(job)
    assert points(job) == [("eval/loss", 0, 0.5)]


def test_a_file_sent_in_many_small_pieces_gives_each_point_once_when_its_record_is_whole(
    job: Job, tmp_path: Path
) -> None:
    data = write_scalars(tmp_path / "w", "loss", [float(i) for i in range(5)])
    added = []
    for start in range(0, len(data), 7):
        answer = send(job, data[start : start + 7], start)
        assert answer.status_code == 201
        added.append(parse_sent(job))
    assert sum(added) == 5 and set(added) <= {0, 1}
    assert [step for _, step, _ in points(job)] == [0, 1, 2, 3, 4]
    row = EventFile.objects.get(job=job)
    assert row.parsed == row.size == len(data) and len(row.chunks) == -(-len(data) // 7)


def test_tensorboard_pages_need_a_login_the_tenant_and_event_files(
    job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.tensorboard.manager import BoardManager

    url = f"/jobs/{job.pk}/tensorboard/"
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    owner = Client()
    assert job.owner is not None
    owner.force_login(job.owner)
    assert owner.get(url).status_code == 404, "no event files yet"
    page = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="tensorboard-link"' in page and " hidden>Open TensorBoard" in page, "hidden until files come"

    assert send(job, write_scalars(tmp_path / "w", "loss", [1.0])).status_code == 201
    page = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="tensorboard-link"' in page and " hidden>Open TensorBoard" not in page
    stranger = Client()
    stranger.force_login(member(make_tenant()))
    assert stranger.get(url).status_code == 404 and stranger.get(f"{url}data/runs").status_code == 404

    full = BoardManager(
        root=tmp_path / "boards", max_processes=0, idle_seconds=60, start_seconds=60, sync_seconds=5
    )
    monkeypatch.setattr("jobs.tensorboard.views.boards", lambda: full)
    busy = owner.get(url)
    assert busy.status_code == 503 and b"0 of 0 TensorBoard instances are in use" in busy.content
    assert full.running() == []


def test_an_ffdl_tensorboard_job_gets_its_learners_event_file_url_and_folder(settings: Any) -> None:
    from jobs import cluster

    settings.ARTIFACTS_BASE_URL = "http://platform.example/"
    settings.TENSORBOARD_SYNC_SECONDS = 3
    tenant = make_tenant()
    manifest = (
        "name: ffdl-tb\nversion: '1.0'\ncpus: 1\nmemory: 1GiB\nlearners: 1\n"
        "framework: {name: pytorch, version: '2.3', command: python train.py}\n"
        "evaluation_metrics: {type: tensorboard, in: $JOB_STATE_DIR/logs/tb}\n"
    )
    job = job_submit(tenant=tenant, user=member(tenant), document=manifest)
    Job.objects.filter(pk=job.pk).update(attempt=1)
    job.refresh_from_db()
    artifacts = cluster.pods_spec(job).artifacts
    assert artifacts is not None
    assert (
        artifacts.tensorboard_url
        == f"http://platform.example/api/v1/artifacts/{job.pk}/1/{{learner}}/tensorboard"
    )
    assert (artifacts.tensorboard_dir, artifacts.tensorboard_interval) == ("$JOB_STATE_DIR/logs/tb", 3)

    plain = job_submit(tenant=tenant, user=member(tenant), document=SPEC.split("evaluation_metrics")[0])
    assert cluster.pods_spec(plain).artifacts.tensorboard_url is None
