"""`trainyard submit --code` and `trainyard download`: code that exists only on the user's disk goes up
with the job, and the files its learners left in RESULT_DIR come back byte-identical (live server)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import Job
from tests.cli.conftest import Account
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPEC = "name: from-disk\nimage: python:3.11\ncommand: [python, train.py]\n"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


@pytest.fixture(autouse=True)
def artifacts(settings: Any, tmp_path: Path) -> None:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "store")},
    }


def test_submit_with_a_code_folder_and_download_the_code_and_the_results(
    account: Account, tmp_path: Path
) -> None:
    code = tmp_path / "model"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('training')\n")
    (code / "pkg" / "net.py").write_bytes(bytes(range(256)))
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"cache")
    os.symlink("/etc/passwd", code / "link")
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)

    submitted = run("submit", str(spec), "--code", str(code), "--json")
    assert submitted.exit_code == 0, submitted.output
    job = Job.objects.get()
    assert job.code is not None and job.code.entries == 2, "caches and links stay behind"

    back = tmp_path / "code-back"
    fetched = run("download", job.pk, "--code", "-o", str(back))
    assert fetched.exit_code == 0, fetched.output
    assert (back / "train.py").read_text() == "print('training')\n"
    assert (back / "pkg" / "net.py").read_bytes() == bytes(range(256))
    assert not (back / "link").exists() and not (back / "__pycache__").exists()

    # The job's learner uploads a model as its launcher would, then the user downloads the results.
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    model = os.urandom(300_000)
    token = mint_token(job_id=job.pk, attempt=1)
    for path, data in (("model.pt", model), ("metrics/final.json", b'{"loss": 0.1}')):
        answer = httpx.put(
            f"{account.url}/api/v1/artifacts/{job.pk}/1/0/results/files/{path}",
            content=data,
            headers={HEADER: token, "X-Trainyard-Sha256": hashlib.sha256(data).hexdigest()},
        )
        assert answer.status_code == 201, answer.text
    listed = run("results", job.pk, "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(f["path"] for f in json.loads(listed.stdout)) == ["metrics/final.json", "model.pt"]
    out = tmp_path / "results"
    downloaded = run("download", job.pk, "-o", str(out))
    assert downloaded.exit_code == 0, downloaded.output
    assert (out / "model.pt").read_bytes() == model
    assert (out / "metrics" / "final.json").read_bytes() == b'{"loss": 0.1}'
    assert "2 file(s)" in downloaded.stderr


def test_bad_code_is_a_clear_usage_error_and_nothing_is_submitted(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    not_zip = tmp_path / "model.zip"
    not_zip.write_text("not a zip")
    result = run("submit", str(spec), "--code", str(not_zip))
    assert result.exit_code == 2 and "neither a folder nor a ZIP" in result.output
    missing = run("submit", str(spec), "--code", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert not Job.objects.exists()


def test_results_lists_every_page_of_a_jobs_result_files(
    account: Account, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("trainyard.client.RESULT_PAGE", 2)  # 5 files: three pages
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert run("submit", str(spec)).exit_code == 0
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    token = mint_token(job_id=job.pk, attempt=1)
    for n in range(5):
        answer = httpx.put(
            f"{account.url}/api/v1/artifacts/{job.pk}/1/0/results/files/out/{n}.txt",
            content=b"x" * n,
            headers={HEADER: token},
        )
        assert answer.status_code == 201, answer.text
    listed = run("results", job.pk, "--json")
    assert listed.exit_code == 0, listed.output
    assert [(f["path"], f["size"]) for f in json.loads(listed.stdout)] == [
        (f"out/{n}.txt", n) for n in range(5)
    ]
    table = run("results", job.pk)
    assert table.exit_code == 0 and "out/4.txt" in table.stdout


def test_downloading_results_of_a_job_without_any_says_so(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert run("submit", str(spec)).exit_code == 0
    job = Job.objects.get()
    result = run("download", job.pk, "-o", str(tmp_path / "out"))
    assert result.exit_code == 1 and "no result files" in result.output
    code = run("download", job.pk, "--code")
    assert code.exit_code == 1 and "without code" in code.output


def test_jobs_delete_removes_a_finished_job_and_refuses_a_running_one(
    account: Account, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The live server has no cluster; deleting the claim on one is covered by tests/e2e/test_artifacts_live.py.
    monkeypatch.setattr("jobs.cluster.delete_checkpoints", lambda job: False)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert run("submit", str(spec)).exit_code == 0
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    refused = run("jobs", "delete", job.pk)
    assert refused.exit_code == 1 and "cancel it first" in refused.output
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    deleted = run("jobs", "delete", job.pk)
    assert deleted.exit_code == 0 and f"deleted job {job.pk}" in deleted.stdout, deleted.output
    assert not Job.objects.exists()
