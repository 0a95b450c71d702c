"""Large uploads against the real web process (`python -m portal.web`, daphne) on the test database: a body
over its route's limit is refused by its headers before any of it is sent, a chunked body is cut at the
limit with nothing of it stored, a streamed result file is stored byte-identical, and the launcher goes on
past a file the platform refuses, which the job then shows (docs/artifacts.md)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from clusterio.podkit import LAUNCHER_SOURCE
from jobs.artifacts.code import zip_directory_bytes
from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, ResultFile
from jobs.services import job_submit
from tests.factories import make_tenant, member
from tests.web_process import web_process

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 8 * 1024 * 1024  # RESULT_MAX_FILE_BYTES of the server under test
CODE_LIMIT = 4 * 1024 * 1024  # its CODE_MAX_BYTES
SPEC = "name: uploads\nimage: python:3.11\ncommand: [python, train.py]\n"
TIMEOUT = 60


class LogSince:
    """The server's log from where it stood when a test began (the server serves the whole module)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def read_text(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace")


@pytest.fixture(scope="module")
def web_server(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, Path]]:
    """One web process for the module, serving the test database with this module's limits: its URL, its
    artifact folder and its log."""
    folder = tmp_path_factory.mktemp("uploads-web")
    artifacts = folder / "artifacts"
    env = {
        "KUBECONFIG": "",
        "ARTIFACT_ROOT": str(artifacts),
        "RESULT_MAX_FILE_BYTES": str(LIMIT),
        "CODE_MAX_BYTES": str(CODE_LIMIT),
    }
    with django_db_blocker.unblock():
        name = str(connection.settings_dict["NAME"])
    with web_process(name, env, folder) as url:
        yield url, artifacts, folder / "daphne.log"


@pytest.fixture
def web(web_server: tuple[str, Path, Path], transactional_db: None) -> tuple[str, Path, LogSince]:
    """The module's web process for one test: its URL, its artifact folder and its log from now on."""
    url, artifacts, log = web_server
    return url, artifacts, LogSince(log)


def running_job() -> Job:
    tenant = make_tenant()
    code = zip_directory_bytes({"train.py": b"print('hi')\n"})
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC, code=code)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    job.refresh_from_db()
    return job


def _answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """Read one HTTP answer with a JSON body off `sock`: its status and body."""
    data = b""
    sock.settimeout(TIMEOUT)
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"the server closed the connection without an answer: {data!r}"
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(body) < length:
        piece = sock.recv(65536)
        assert piece, "the answer was cut short"
        body += piece
    return int(lines[0].split(" ", 2)[1]), json.loads(body[:length])


def _headers_only(url: str, request: str) -> tuple[int, dict[str, Any]]:
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(request.encode("latin-1"))
        return _answer(sock)


def stored_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_body_over_the_limit_is_refused_by_its_headers_before_any_of_it_is_sent(
    web: tuple[str, Path, LogSince],
) -> None:
    url, artifacts, _ = web
    job = running_job()
    token = mint_token(job_id=job.pk, attempt=1)
    before = stored_files(artifacts / "results")  # what earlier tests of the module stored
    # Only the headers go out: the answer comes without the server waiting for a body.
    status, body = _headers_only(
        url,
        f"PUT /api/v1/artifacts/{job.pk}/1/0/results/files/huge.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"{HEADER}: {token}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {5 * 1024**3}\r\n\r\n",
    )
    assert status == 413
    assert body["limit"] == LIMIT and body["cap"] == "result_file_bytes"
    assert body["detail"] == f"a result file may be at most {LIMIT} bytes" and body["errors"] == {
        "": [body["detail"]]
    }
    # The same for a code upload with a job submission, named after the code limit.
    status, body = _headers_only(
        url,
        "POST /api/v1/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
        f"Expect: 100-continue\r\nContent-Length: {CODE_LIMIT * 2}\r\n\r\n",
    )
    assert status == 413 and body["limit"] > CODE_LIMIT and str(CODE_LIMIT) in body["detail"]
    assert not ResultFile.objects.exists() and stored_files(artifacts / "results") == before


def test_a_chunked_body_past_the_limit_is_cut_there_and_nothing_of_it_is_stored(
    web: tuple[str, Path, LogSince],
) -> None:
    url, artifacts, log = web
    job = running_job()
    token = mint_token(job_id=job.pk, attempt=1)
    before = stored_files(artifacts / "results")  # what earlier tests of the module stored
    port = int(url.rsplit(":", 1)[1])
    piece = os.urandom(256 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(
            f"PUT /api/v1/artifacts/{job.pk}/1/0/results/files/stream.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"{HEADER}: {token}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        while sent <= LIMIT + len(piece):  # past the limit, never to the end of the body
            sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            sent += len(piece)
        status, body = _answer(sock)
    assert status == 413 and body["limit"] == LIMIT
    assert "more than 8388608 bytes received" in log.read_text()
    assert not ResultFile.objects.exists() and stored_files(artifacts / "results") == before


def test_a_streamed_result_file_is_stored_byte_identical_with_or_without_a_length(
    web: tuple[str, Path, LogSince],
) -> None:
    url, artifacts, _ = web
    job = running_job()
    token = mint_token(job_id=job.pk, attempt=1)
    data = os.urandom(LIMIT - 1)
    sha = hashlib.sha256(data).hexdigest()
    host = url.removeprefix("http://")
    for name, chunked in (("sized.bin", False), ("chunked.bin", True)):
        client = http.client.HTTPConnection(host, timeout=TIMEOUT)
        pieces = (data[i : i + 1_000_000] for i in range(0, len(data), 1_000_000))
        client.request(
            "PUT",
            f"/api/v1/artifacts/{job.pk}/1/0/results/files/{name}",
            body=pieces if chunked else data,
            headers={HEADER: token, "X-Trainyard-Sha256": sha},
            encode_chunked=chunked,
        )
        answer = client.getresponse()
        assert answer.status == 201, answer.read()
        assert json.loads(answer.read()) == {"path": name, "size": len(data), "sha256": sha}
        client.close()
    for row in ResultFile.objects.filter(job=job):
        stored = (artifacts / row.storage_name).read_bytes()
        assert (row.size, row.sha256, hashlib.sha256(stored).hexdigest()) == (len(data), sha, sha)
    assert ResultFile.objects.filter(job=job).count() == 2


def test_a_code_zip_submitted_through_the_web_process_is_stored_intact(
    web: tuple[str, Path, LogSince],
) -> None:
    from tenants.tokens import token_create

    url, artifacts, _ = web
    tenant = make_tenant()
    _, api_token = token_create(user=member(tenant), name="uploads")
    archive = zip_directory_bytes({"train.py": b"print('hi')\n", "weights.bin": os.urandom(3 * 1024 * 1024)})
    boundary = "uploadsboundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n\r\n{SPEC}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="code"; filename="code.zip"\r\n'
            "Content-Type: application/zip\r\n\r\n"
        ).encode()
        + archive
        + f"\r\n--{boundary}--\r\n".encode()
    )
    client = http.client.HTTPConnection(url.removeprefix("http://"), timeout=TIMEOUT)
    client.request(
        "POST",
        f"/api/v1/jobs/?tenant={tenant.slug}",
        body=form,
        headers={
            "Authorization": f"Bearer {api_token}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    answer = client.getresponse()
    assert answer.status == 201, answer.read()
    job = Job.objects.get(pk=json.loads(answer.read())["id"])
    client.close()
    assert job.code is not None and job.code.sha256 == hashlib.sha256(archive).hexdigest()
    assert (artifacts / job.code.storage_name).read_bytes() == archive


def test_the_launcher_goes_on_past_a_refused_file_and_the_job_shows_what_was_not_stored(
    web: tuple[str, Path, LogSince], tmp_path: Path
) -> None:
    url, _artifacts, log = web
    job = running_job()
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    (results / "a.txt").write_bytes(b"first")
    (results / "big.bin").write_bytes(b"\0" * (LIMIT + 1))
    (results / "logs" / "z.csv").write_bytes(b"step,loss\n1,0.5\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RESULT_DIR": str(results),
        "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "TRAINYARD_ARTIFACT_TOKEN": mint_token(job_id=job.pk, attempt=1),
        "TRAINYARD_RESULTS_URL": f"{url}/api/v1/artifacts/{job.pk}/1/0/results",
        "TRAINYARD_UPLOAD_RETRY_SECONDS": "5",
    }
    started = time.monotonic()
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCHER_SOURCE, "true"], env=env, capture_output=True, timeout=TIMEOUT
    )
    stderr = launched.stderr.decode()
    assert launched.returncode == 0, stderr
    assert stderr.rstrip().rsplit("\n", 1)[-1] == "trainyard: uploaded 2 result file(s), 21 bytes; 1 refused"
    assert "'big.bin' (8388609 bytes) refused: HTTP 413" in stderr
    assert time.monotonic() - started < 20, "the refusal came by the headers, not after the body"
    assert (
        "refused a request body over 8388608 bytes (result_file_bytes): Content-Length 8388609"
        in log.read_text()
    )
    assert sorted(ResultFile.objects.filter(job=job).values_list("path", flat=True)) == [
        "a.txt",
        "logs/z.csv",
    ]

    uploaded = JobEvent.objects.get(job=job, reason="ResultsUploaded")
    assert uploaded.message == "learner 0 uploaded 2 result file(s), 21 bytes; 1 refused"
    refusal = JobEvent.objects.get(job=job, reason="ResultsRefused")
    assert refusal.data["refused"] == [
        {
            "path": "big.bin",
            "size": LIMIT + 1,
            "status": 413,
            "detail": f"a result file may be at most {LIMIT} bytes",
        }
    ]
    owner = Client()
    assert job.owner is not None
    owner.force_login(job.owner)
    page = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="results-refused"' in page
    assert f"big.bin ({LIMIT + 1} bytes): a result file may be at most {LIMIT} bytes" in page


def test_the_view_refuses_a_declared_length_over_the_limit_without_reading_the_body(settings: Any) -> None:
    settings.RESULT_MAX_FILE_BYTES = 10
    job = running_job()
    answer = Client(headers={HEADER: mint_token(job_id=job.pk, attempt=1)}).put(
        f"/api/v1/artifacts/{job.pk}/1/0/results/files/x.bin",
        b"",
        content_type="application/octet-stream",
        CONTENT_LENGTH="11",
    )
    assert answer.status_code == 413 and answer.json()["limit"] == 10
    assert not ResultFile.objects.exists()


@pytest.mark.parametrize(
    "refused",
    [
        "not a list",
        [{"path": "a", "size": -1, "status": 413, "detail": ""}],
        [{"path": "", "size": 1, "status": 413, "detail": ""}],
        [{"path": "a", "size": 1, "status": 413, "detail": "", "extra": 1}],
        [{"path": "a", "size": 1, "status": 413, "detail": ""}] * 51,
    ],
)
def test_a_bad_refused_list_in_the_end_report_is_a_400_and_records_nothing(refused: Any) -> None:
    job = running_job()
    answer = Client(headers={HEADER: mint_token(job_id=job.pk, attempt=1)}).post(
        f"/api/v1/artifacts/{job.pk}/1/0/results/complete",
        {"exit_code": 0, "files": 0, "bytes": 0, "refused": refused},
        content_type="application/json",
    )
    assert answer.status_code == 400 and "refused must be" in answer.json()["detail"]
    assert not JobEvent.objects.filter(job=job, kind="results").exists()
