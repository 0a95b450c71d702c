"""A result file over the size limit in a real job on kubesim: the launcher in the learner's pod sends its
headers only, the web process (`python -m portal.web`) refuses it by its Content-Length, the launcher goes
on with the other files, and the job, which succeeds, says on its page which file was not stored and why.

Processes: a web process of this module's own (RESULT_MAX_FILE_BYTES 1 MiB), and in this process the job
engine's worker and watcher (the `engine` fixture) on the session's kubesim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from jobs import cluster
from jobs.artifacts.code import zip_directory_bytes
from jobs.models import JobEvent, LogLine, ResultFile
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.clusters import pod_url
from tests.e2e.conftest import _test_database_name
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, wait_status, wait_until
from tests.web_process import web_process

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LIMIT = 1 << 20
GPU = "Uploads-GPU"
TRAIN = f"""
import os, pathlib
out = pathlib.Path(os.environ["RESULT_DIR"])
(out / "big.bin").write_bytes(b"\\0" * {LIMIT + 1})
(out / "small.txt").write_text("kept")
print("results written", flush=True)
"""
SPEC = f"""
name: too-large-result
image: python:3.11
command: [python, train.py]
resources: {{gpus: 1, gpu_type: {GPU}, cpu: 500m, memory: 256Mi}}
retries: 0
"""


@pytest.fixture(scope="module")
def small_limit_server_url(
    django_db_setup: None, django_db_blocker: Any, kubesim_cluster: KubeSim, tmp_path_factory: Any
) -> Iterator[str]:
    """A web process whose result files may be at most LIMIT bytes, with the session's kubesim as cluster."""
    name = _test_database_name(django_db_blocker)
    env = {"KUBECONFIG": str(kubesim_cluster.kubeconfig_path), "RESULT_MAX_FILE_BYTES": str(LIMIT)}
    with web_process(name, env, tmp_path_factory.mktemp("uploads-server")) as url:
        yield url


@pytest.mark.kubesim_only
def test_a_result_file_over_the_limit_is_refused_by_its_headers_and_the_job_says_so(
    engine: KubeSim, small_limit_server_url: str, settings: Any
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, small_limit_server_url)
    settings.ARTIFACT_FETCH_IMAGE = "trainyard:test"
    engine.add_gpu_node("uploads-0", gpus=1, labels={"nvidia.com/gpu.product": GPU})
    # Submit checks the GPU type against the watcher's node summary: wait until it has the new node.
    wait_until(lambda: GPU in cluster.gpu_products(), timeout=30, what="the node summary to list the node")
    tenant = make_tenant(gpus=4)
    job = job_submit(
        tenant=tenant,
        user=member(tenant),
        document=SPEC,
        code=zip_directory_bytes({"train.py": TRAIN.encode()}),
    )
    job = wait_status(job, "succeeded", timeout=120)
    wait_until(
        lambda: JobEvent.objects.filter(job=job, reason="ResultsRefused").exists(),
        timeout=30,
        what="the refusal to be recorded",
    )
    assert list(ResultFile.objects.filter(job=job).values_list("path", flat=True)) == ["small.txt"]
    refusal = JobEvent.objects.get(job=job, reason="ResultsRefused")
    assert refusal.data["refused"] == [
        {
            "path": "big.bin",
            "size": LIMIT + 1,
            "status": 413,
            "detail": f"a result file may be at most {LIMIT} bytes",
        }
    ], describe(job, logs=True)
    wait_until(
        lambda: LogLine.objects.filter(job=job, text__contains="1 refused").exists(),
        timeout=30,
        what="the launcher's last line in the log",
    )
    lines = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert "trainyard: uploaded 1 result file(s), 4 bytes; 1 refused" in lines, lines
    owner = Client()
    assert job.owner is not None
    owner.force_login(job.owner)
    page = owner.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="results-refused"' in page and "big.bin (1048577 bytes)" in page
