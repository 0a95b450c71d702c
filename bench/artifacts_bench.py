"""Artifacts benchmark: what carrying code in and results out costs (docs/artifacts.md).

Run: ``.venv/bin/python bench/artifacts_bench.py`` (about a minute on 2 cores; JSON lines). It uses what
``bench/engine_bench.py`` sets up (database ``trainyard_bench``, Redis db 14, kubesim in-process, a Celery
worker and the watch loop in threads) plus the web process (``python -m portal.web``, daphne) on a free
port for the artifact endpoints, the same portal code a deployment serves them with.

Figures:

1. ``submit_to_running_ms``: p50 over N jobs with a 10 MB code ZIP (incompressible bytes: the fetch init
   container downloads, checks and unpacks it before the learner starts), and the same job without code
   measured in the same run; ``ratio_p50`` is with / without.
2. ``results_upload``: the pod kit's launcher (``clusterio/podkit/launcher.py``, run as pods run it)
   uploading 200 MB of result files (20 x 10 MB) to that server: MB/s, median of 3, against copying the
   same files on the local disk (``shutil.copytree``) in the same run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.benchdb import prepare_database
from bench.engine_bench import (
    ROOT,
    PodClock,
    emit,
    running_engine,
    settings,
    wait_for,
)

CODE_MB = 10
RESULT_FILES, RESULT_MB = 20, 10
JOBS = 5


@contextmanager
def daphne(artifacts: Path) -> Iterator[str]:
    """The portal on a free port, against the bench database and artifact folder."""
    import socket

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "E2E_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
        "ARTIFACT_ROOT": str(artifacts),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "portal.web",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "tests.e2e.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, "daphne")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def tenant_and_user() -> tuple[object, object]:
    from django.contrib.auth import get_user_model

    from tenants.models import Quota, Tenant
    from tenants.services import membership_set

    tenant = Tenant.objects.create(slug="artifacts", name="Artifacts")
    Quota.objects.create(
        tenant=tenant, gpus=0, cpu_millis=8000, memory_mib=16384, max_running_jobs=4, max_queued_jobs=100
    )
    user = get_user_model().objects.create_user(username="artifacts", password=None)
    membership_set(tenant=tenant, user=user, role="member")
    return tenant, user


def submit_to_running(tenant: object, user: object, code: bytes | None) -> float:
    from jobs.models import Job, JobEvent
    from jobs.services import job_submit

    document = {
        "name": "with-code" if code else "without-code",
        "image": "python:3.11",
        "command": ["python", "-c", "print('up', flush=True)"],
        "resources": {"cpu": "500m", "memory": "256Mi"},
    }
    job = job_submit(tenant=tenant, user=user, document=document, code=code)  # type: ignore[arg-type]
    submitted = time.time()

    def done() -> bool:
        return Job.objects.filter(pk=job.pk, status__in=("succeeded", "failed")).exists()

    wait_for(done, 120, f"job {job.pk}")
    job.refresh_from_db()
    if job.status != "succeeded":
        raise RuntimeError(f"job {job.pk} {job.status}: {job.reason} {job.message}")
    running = JobEvent.objects.get(job=job, kind="transition", to_status="running").created_at.timestamp()
    return (running - submitted) * 1000


def code_latency() -> dict[str, object]:
    from jobs.artifacts.code import zip_directory_bytes

    tenant, user = tenant_and_user()
    code = zip_directory_bytes({"blob.bin": os.urandom(CODE_MB * 2**20), "train.py": b"print(1)\n"})
    submit_to_running(tenant, user, None)  # warm-up: the tenant's namespace objects
    plain = [submit_to_running(tenant, user, None) for _ in range(JOBS)]
    carried = [submit_to_running(tenant, user, code) for _ in range(JOBS)]
    return {
        "bench": "artifacts",
        "metric": "submit_to_running_ms",
        "code_zip_mb": round(len(code) / 2**20, 1),
        "with_code_p50": round(statistics.median(carried), 1),
        "without_code_p50": round(statistics.median(plain), 1),
        "ratio_p50": round(statistics.median(carried) / statistics.median(plain), 3),
        "n": JOBS,
    }


def upload_throughput(url: str, scratch: Path) -> dict[str, object]:
    from clusterio.podkit import LAUNCHER_SOURCE
    from jobs.artifacts.tokens import mint_token
    from jobs.core.states import JobStatus
    from jobs.models import Job, ResultFile
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug="artifacts")
    owner = tenant.memberships.get().user
    job = Job.objects.create(
        tenant=tenant, owner=owner, name="uploads", spec={}, status=JobStatus.RUNNING, attempt=1
    )
    results = scratch / "results"
    results.mkdir()
    for i in range(RESULT_FILES):
        (results / f"part-{i:02}.bin").write_bytes(os.urandom(RESULT_MB * 2**20))
    total_mb = RESULT_FILES * RESULT_MB
    env = os.environ | {
        "TRAINYARD_RESULTS_URL": f"{url}/api/v1/artifacts/{job.pk}/1/0/results",
        "TRAINYARD_ARTIFACT_TOKEN": mint_token(job_id=job.pk, attempt=1),
        "RESULT_DIR": str(results),
        "CHECKPOINT_DIR": str(scratch / "none"),
    }
    uploads, copies = [], []
    for run in range(3):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", LAUNCHER_SOURCE, "true"], env=env, check=True, capture_output=True
        )
        uploads.append(time.perf_counter() - started)
        started = time.perf_counter()
        shutil.copytree(results, scratch / f"copy-{run}")
        copies.append(time.perf_counter() - started)
    stored = ResultFile.objects.filter(job=job)
    first = results / "part-00.bin"
    assert stored.count() == RESULT_FILES, "every file uploaded"
    assert stored.get(path="part-00.bin").sha256 == hashlib.sha256(first.read_bytes()).hexdigest()
    upload_mb_s = total_mb / statistics.median(uploads)
    copy_mb_s = total_mb / statistics.median(copies)
    return {
        "bench": "artifacts",
        "metric": "results_upload",
        "mb": total_mb,
        "files": RESULT_FILES,
        "upload_mb_per_s": round(upload_mb_s, 1),
        "local_copy_mb_per_s": round(copy_mb_s, 1),
        "upload_over_copy": round(upload_mb_s / copy_mb_s, 3),
        "runs": 3,
    }


def main() -> None:
    started = time.perf_counter()
    prepare_database()
    scratch = Path(tempfile.mkdtemp(prefix="artifacts-bench-"))
    artifacts = scratch / "store"
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(artifacts)},
    }
    try:
        with daphne(artifacts) as url:
            settings.ARTIFACTS_BASE_URL = url
            settings.ARTIFACT_FETCH_IMAGE = "trainyard:bench"
            with running_engine(PodClock()):
                emit(code_latency())
            emit(upload_throughput(url, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    emit({"bench": "artifacts_bench", "wall_s": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()
