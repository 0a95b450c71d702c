"""Upload benchmark: the web process's memory while large bodies come in (docs/artifacts.md, "Large uploads").

Run: ``.venv/bin/python bench/upload_bench.py`` (a minute or two on 2 cores; JSON lines). It starts the web
process as deployments run it (``python -m portal.web``, daphne) on a free port against database
``trainyard_upload_bench`` (created if missing, migrated, flushed) and Redis db 13 (or
``UPLOAD_BENCH_REDIS_URL``), and, for comparison, stock daphne (``python -m daphne``) the same way.

Each line: ``server``, ``upload`` (what was sent), ``mib``, ``status`` (the answer), ``seconds``,
``rss_idle_mb`` (the server's resident memory before it) and ``peak_rss_mb`` (its peak during it:
``VmHWM``, reset through ``/proc/<pid>/clear_refs`` before each upload). Uploads:

- ``result``: one result file PUT to the pod endpoint (64 MiB, 1 GiB), and two 64 MiB ones at once;
- ``code``: a job submission (``POST /api/v1/jobs/``, multipart) with a 64 MiB code ZIP;
- ``refused``: a 5 GiB result file, over RESULT_MAX_FILE_BYTES (4 GiB): the headers only, with
  ``Expect: 100-continue`` as the launcher sends them.

Stock daphne gets the 64 MiB uploads only (it holds a whole body in memory: 1 GiB would take several GB of
this machine's memory); ``--no-baseline`` leaves it out.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchdb import prepare_database  # noqa: E402

BENCH_DB = "trainyard_upload_bench"
BENCH_REDIS = os.environ.get("UPLOAD_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
os.environ["REDIS_URL"] = BENCH_REDIS


MIB = 1 << 20
BLOCK = os.urandom(MIB)  # bodies repeat one random MiB: the server's work, not the client's, is measured


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset the peak resident set size (VmHWM)


@contextmanager
def server(module: str, artifacts: Path) -> Iterator[tuple[str, int]]:
    """`python -m <module>` serving the portal on a free port; yields its URL and pid."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "E2E_DATABASE_NAME": BENCH_DB,
        "REDIS_URL": BENCH_REDIS,
        "KUBECONFIG": "",
        "ARTIFACT_ROOT": str(artifacts),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", module, "-b", "127.0.0.1", "-p", str(port), "tests.e2e.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                connection.request("GET", "/healthz")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{module} did not start")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def body(size: int) -> Iterator[bytes]:
    for _ in range(size // MIB):
        yield BLOCK


def sha_of(size: int) -> str:
    digest = hashlib.sha256()
    for piece in body(size):
        digest.update(piece)
    return digest.hexdigest()


def put_result(host: str, job_id: str, token: str, name: str, size: int, sha: str) -> int:
    connection = http.client.HTTPConnection(host, timeout=600)
    connection.putrequest("PUT", f"/api/v1/artifacts/{job_id}/1/0/results/files/{name}")
    for header, value in (
        ("X-Trainyard-Artifact-Token", token),
        ("X-Trainyard-Sha256", sha),
        ("Content-Type", "application/octet-stream"),
        ("Content-Length", str(size)),
    ):
        connection.putheader(header, value)
    connection.endheaders()
    for piece in body(size):
        connection.send(piece)
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer.status


def refused_by_headers(host: str, job_id: str, token: str) -> int:
    hostname, port = host.split(":")
    with socket.create_connection((hostname, int(port)), timeout=60) as sock:
        sock.sendall(
            f"PUT /api/v1/artifacts/{job_id}/1/0/results/files/huge.bin HTTP/1.1\r\nHost: {host}\r\n"
            f"X-Trainyard-Artifact-Token: {token}\r\nExpect: 100-continue\r\nContent-Length: {5 << 30}\r\n\r\n".encode()
        )
        line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(line.split(" ")[1])


def code_zip(size: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("train.py", b"print('hi')\n")
        archive.writestr("weights.bin", b"".join(body(size - MIB)))
    return buffer.getvalue()


def submit_code(host: str, api_token: str, archive: bytes) -> int:
    boundary = "benchboundary"
    spec = "name: upload-bench\nimage: python:3.11\ncommand: [python, train.py]\n"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n\r\n{spec}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="code"; filename="code.zip"\r\n'
        "Content-Type: application/zip\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    connection = http.client.HTTPConnection(host, timeout=600)
    connection.putrequest("POST", "/api/v1/jobs/?tenant=bench")
    connection.putheader("Authorization", f"Bearer {api_token}")
    connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    connection.putheader("Content-Length", str(len(head) + len(archive) + len(tail)))
    connection.endheaders()
    connection.send(head)
    for start in range(0, len(archive), MIB):
        connection.send(archive[start : start + MIB])
    connection.send(tail)
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer.status


def measure(name: str, pid: int, upload: str, mib: int, run: Callable[[], object]) -> None:
    idle = _status_kb(pid, "VmRSS")
    reset_peak(pid)
    started = time.monotonic()
    status = run()
    seconds = time.monotonic() - started
    emit(
        {
            "server": name,
            "upload": upload,
            "mib": mib,
            "status": status,
            "seconds": round(seconds, 2),
            "rss_idle_mb": round(idle / 1024, 1),
            "peak_rss_mb": round(_status_kb(pid, "VmHWM") / 1024, 1),
        }
    )


def fixtures() -> tuple[str, str, str]:
    """A running job with its artifact token, and an API token of a member of tenant `bench`."""
    from django.contrib.auth import get_user_model

    from jobs.artifacts.tokens import mint_token
    from jobs.models import Job
    from jobs.services import job_submit
    from tenants.models import Quota, Tenant
    from tenants.services import membership_set
    from tenants.tokens import token_create

    tenant = Tenant.objects.create(slug="bench", name="Bench")
    Quota.objects.create(
        tenant=tenant, gpus=0, cpu_millis=8000, memory_mib=16384, max_running_jobs=4, max_queued_jobs=100
    )
    user = get_user_model().objects.create_user(username="bench", password=None)
    membership_set(tenant=tenant, user=user, role="member")
    document = {"name": "bench", "image": "python:3.11", "command": ["true"]}
    job = job_submit(tenant=tenant, user=user, document=document)
    Job.objects.filter(pk=job.pk).update(status="running", attempt=1)
    _, api_token = token_create(user=user, name="bench")
    return job.pk, mint_token(job_id=job.pk, attempt=1), api_token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--no-baseline", action="store_true", help="leave stock daphne out")
    args = parser.parse_args()
    prepare_database(BENCH_DB)
    job_id, token, api_token = fixtures()
    archive = code_zip(64 * MIB - 64 * 1024)
    sha64, sha1g = sha_of(64 * MIB), sha_of(1024 * MIB)
    servers = [("portal.web", "portal.web")] + ([] if args.no_baseline else [("daphne", "daphne")])
    for name, module in servers:
        with (
            tempfile.TemporaryDirectory(prefix="upload-bench-") as folder,
            server(module, Path(folder)) as (host, pid),
        ):
            measure(
                name, pid, "result", 64, lambda: put_result(host, job_id, token, "r64.bin", 64 * MIB, sha64)
            )

            def two() -> list[int]:
                answers: list[int] = []
                threads = [
                    threading.Thread(
                        target=lambda n=n: answers.append(put_result(host, job_id, token, n, 64 * MIB, sha64))
                    )
                    for n in ("a.bin", "b.bin")
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return sorted(answers)

            measure(name, pid, "result x2 at once", 64, two)
            measure(name, pid, "code", 64, lambda: submit_code(host, api_token, archive))
            if name == "portal.web":
                measure(
                    name,
                    pid,
                    "result",
                    1024,
                    lambda: put_result(host, job_id, token, "r1g.bin", 1024 * MIB, sha1g),
                )
                measure(
                    name,
                    pid,
                    "refused (headers only)",
                    5 * 1024,
                    lambda: refused_by_headers(host, job_id, token),
                )


if __name__ == "__main__":
    main()
