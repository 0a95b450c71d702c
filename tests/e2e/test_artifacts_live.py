"""The FfDL model-definition workflow end to end, with real parts only: code that exists only on the
user's disk goes up with an FfDL manifest through the CLI, the learner's init container fetches it (and a
dataset from an S3 bucket served by moto's server mode, a real S3 HTTP API) with its attempt's token, the
job trains with PyTorch under the launcher, checkpoints to its claim, loses its node, is requeued,
resumes from the last checkpoint, writes a model to RESULT_DIR, and the model comes back byte-identical
through the API and the CLI. The data store's password shows up in no API answer, log line, event or pod.

Processes: the live daphne server (artifact endpoints, API) and, in this process, the job engine's worker
and watcher (the `engine` fixture) on the session's kubesim.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from clusterio import names
from jobs import cluster
from jobs.artifacts.code import zip_directory_bytes
from jobs.models import Job, JobEvent, LogLine, ResultFile
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tenants.tokens import token_create
from tests.clusters import pod_url
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import describe, wait_status, wait_until
from trainyard import cli, config

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "s3cr3t-for-the-bucket"
GPU = "Artifact-GPU"

TRAIN = """
import hashlib, io, json, os, pathlib, time
import torch

data = pathlib.Path(os.environ["DATA_DIR"]) / "toy" / "points.csv"
rows = [tuple(map(float, line.split(","))) for line in data.read_text().split()]
x = torch.tensor([[r[0]] for r in rows]); y = torch.tensor([[r[1]] for r in rows])
print(f"dataset {len(rows)} rows from s3", flush=True)
ckpt = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "state.pt"
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if ckpt.exists():
    state = torch.load(ckpt)
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"]); start = state["step"]
print(f"resuming from step {start}", flush=True)
for step in range(start, 40):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}, tmp)
    os.replace(tmp, ckpt)
    print(json.dumps({"step": step, "metrics": {"loss": loss.item()}}), flush=True)
    time.sleep(0.1)
buffer = io.BytesIO(); torch.save(model.state_dict(), buffer)
out = pathlib.Path(os.environ["RESULT_DIR"]) / "model.pt"
out.write_bytes(buffer.getvalue())
print("model sha256", hashlib.sha256(buffer.getvalue()).hexdigest(), flush=True)
"""


def manifest(s3_url: str) -> str:
    return f"""
name: ffdl-with-code
version: "1.0"
gpus: 1
gpu_type: {GPU}
cpus: 1
memory: 1GiB
learners: 1
data_stores:
  - id: cos
    type: s3_datastore
    training_data: {{container: datasets}}
    training_results: {{container: results}}
    connection: {{auth_url: "{s3_url}", user_name: user, password: {PASSWORD}}}
framework:
  name: custom
  version: "python:3.11"
  command: python train.py
"""


@pytest.mark.kubesim_only
def test_code_from_disk_trains_on_s3_data_survives_a_lost_node_and_its_model_comes_back(
    engine: KubeSim,
    live_server_url: str,
    s3_server: str,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    settings.ARTIFACT_FETCH_IMAGE = "trainyard:test"
    engine.add_gpu_node("artifact-0", gpus=1, labels={"nvidia.com/gpu.product": GPU})
    s3_url = pod_url(engine, s3_server)
    tenant = allow(make_tenant(gpus=4), datastore_hosts=[urlsplit(s3_url).hostname])  # moto's server
    user = member(tenant)
    _, token = token_create(user=user, name="e2e")
    monkeypatch.setenv(config.URL_ENV, live_server_url)
    monkeypatch.setenv(config.TOKEN_ENV, token)
    monkeypatch.setenv("HOME", str(tmp_path))
    code = tmp_path / "model-code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    spec = tmp_path / "manifest.yml"
    spec.write_text(manifest(s3_url))

    submitted = CliRunner().invoke(cli.app, ["submit", str(spec), "--code", str(code), "--json"])
    assert submitted.exit_code == 0, submitted.output
    job = Job.objects.get(pk=json.loads(submitted.stdout)["id"])
    assert job.code is not None and job.source == "ffdl"

    wait_status(job, "running", timeout=60, logs=True)
    pods, _ = cluster.cluster().list_pods(label_selector=f"trainyard.io/job={job.pk}")
    assert pods and "initContainers" in pods[0]["spec"], "the code came through the fetch init container"
    assert PASSWORD not in json.dumps(pods), "no credential in a pod spec, not even as an env literal"
    wait_until(lambda: LogLine.objects.filter(job=job, text__startswith='{"step": 5').exists(), timeout=60)
    engine.lose_node("artifact-0")
    wait_until(
        lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(), timeout=30, what="a requeue"
    )
    engine.add_gpu_node("artifact-1", gpus=1, labels={"nvidia.com/gpu.product": GPU})
    job = wait_status(job, "succeeded", timeout=120, logs=True)

    assert job.attempt == 2, describe(job)
    texts = list(LogLine.objects.filter(job=job).order_by("attempt", "seq").values_list("attempt", "text"))
    assert (1, "dataset 20 rows from s3") in texts and (2, "dataset 20 rows from s3") in texts
    resumed = next(text for attempt, text in texts if attempt == 2 and text.startswith("resuming from step"))
    assert int(resumed.split()[-1]) >= 5, texts
    printed = next(text for _, text in texts if text.startswith("model sha256 ")).split()[-1]
    result = ResultFile.objects.get(job=job, path="model.pt")
    assert (result.attempt, result.sha256) == (2, printed)
    assert job.checkpoint_bytes and job.checkpoint_bytes > 0

    with httpx.Client(
        base_url=live_server_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        over_api = api.get(f"/api/v1/jobs/{job.pk}/results/model.pt")
        assert over_api.status_code == 200 and hashlib.sha256(over_api.content).hexdigest() == printed
        answers = [
            api.get(f"/api/v1/jobs/{job.pk}/{suffix}").text for suffix in ("", "events/", "logs/", "results/")
        ]
    assert not LogLine.objects.filter(job=job, text__contains=PASSWORD).exists()
    answers_events = list(job.events.values_list("message", "data"))
    out = tmp_path / "downloaded"
    downloaded = CliRunner().invoke(cli.app, ["download", job.pk, "--results", "-o", str(out)])
    assert downloaded.exit_code == 0, downloaded.output
    assert (out / "model.pt").read_bytes() == over_api.content

    # The checkpoint claim outlived both attempts; deleting the job deletes it, with the job's files.
    core = cluster.cluster().core
    namespace, claim = cluster.namespace_for(tenant), names.checkpoint_claim_name(job.pk, 0)  # its own (RWO)
    assert core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound"
    with httpx.Client(
        base_url=live_server_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        assert api.delete(f"/api/v1/jobs/{job.pk}/").status_code == 204
    wait_until(lambda: not _claim_exists(core, claim, namespace), timeout=30, what="the claim to be deleted")
    assert not Job.objects.filter(pk=job.pk).exists() and not ResultFile.objects.exists()

    # The data store's password: in no API answer, log line or event.
    assert all(PASSWORD not in answer for answer in answers)
    assert PASSWORD not in json.dumps(answers_events)


@pytest.mark.kubesim_only
def test_a_missing_bucket_fails_the_job_with_the_fetch_error(
    engine: KubeSim, live_server_url: str, s3_server: str, settings: Any
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    settings.ARTIFACT_FETCH_IMAGE = "trainyard:test"
    engine.add_gpu_node("artifact-2", gpus=1, labels={"nvidia.com/gpu.product": GPU})
    s3_url = pod_url(engine, s3_server)
    tenant = allow(make_tenant(gpus=4), datastore_hosts=[urlsplit(s3_url).hostname])  # moto's server
    document = manifest(s3_url).replace("{container: datasets}", "{container: no-such-bucket}")
    job = job_submit(
        tenant=tenant, user=member(tenant), document=document, code=zip_directory_bytes({"train.py": b""})
    )
    job = wait_status(job, "failed", timeout=60)
    assert job.reason == "FetchFailed", describe(job)
    assert "no-such-bucket" in job.message and PASSWORD not in job.message, job.message
    assert job.attempt == 1 and not LogLine.objects.filter(job=job).exists()


def _claim_exists(core: Any, name: str, namespace: str) -> bool:
    try:
        core.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
