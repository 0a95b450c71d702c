"""FfDL's CLI workflow against Trainyard's FfDL API end to end, with the requests FfDL's CLI sends
(cli/cmd/*.go over restapi/api_v1/client: basic auth from DLAAS_USERNAME/DLAAS_PASSWORD, the
`X-Watson-Userinfo` header, `?version=`, multipart `manifest` + `model_definition`): `ffdl train` submits a
manifest whose command runs python from the model ZIP, `ffdl show` follows its FfDL status, `ffdl logs`
reads its log, `ffdl halt` stops it (and Trainyard's `resume` sends it on from its checkpoint), `ffdl
download --trainedmodel` brings back the file it wrote to RESULT_DIR, `ffdl delete` deletes it.

Processes: the live daphne server and, in this process, the engine's worker and watcher on kubesim.
"""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jobs.artifacts.code import zip_directory_bytes
from jobs.models import Job, MetricSample
from kubesim.testing import KubeSim
from tenants.tokens import token_create
from tests.clusters import pod_url
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TRAIN = """
import json, os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"resuming from {start}", flush=True)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(True))
for step in range(start, 60):
    if told:
        print(f"stopping after step {step}", flush=True)
        sys.exit(0)
    time.sleep(0.1)
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step + 1))
    os.replace(tmp, ck)
    print(json.dumps({"metric": "loss", "value": 1 / (step + 1), "step": step}), flush=True)
(pathlib.Path(os.environ["RESULT_DIR"]) / "model.txt").write_text(f"trained, resumed from {start}")
print("finished", flush=True)
"""

MANIFEST = """
name: ffdl-cli-model
version: "1.0"
description: trained through FfDL's API
cpus: 0.25
memory: 128MiB
learners: 1
framework:
  name: custom
  version: "python:3.11"
  command: python train.py
"""
VERSION = {"version": "2017-02-13"}


@pytest.fixture
def ffdl(engine: KubeSim, live_server_url: str, settings: Any) -> Iterator[tuple[httpx.Client, Any]]:
    """An HTTP client set up as FfDL's CLI is with DLAAS_URL=<server>/ffdl, DLAAS_USERNAME=<tenant slug>
    and DLAAS_PASSWORD=<a Trainyard API token>."""
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    settings.ARTIFACT_FETCH_IMAGE = "trainyard:test"
    tenant = make_tenant()
    user = member(tenant)
    _, token = token_create(user=user, name="ffdl-cli")
    basic = base64.b64encode(f"{tenant.slug}:{token}".encode()).decode()
    headers = {"Authorization": f"Basic {basic}", "X-Watson-Userinfo": f"bluemix-instance-id={tenant.slug}"}
    with httpx.Client(base_url=live_server_url + "/ffdl/", headers=headers, timeout=60) as client:
        yield client, tenant


def show(client: httpx.Client, model_id: str) -> dict[str, Any]:
    """`ffdl show MODEL_ID`: GET /v1/models/{model_id}."""
    response = client.get(f"v1/models/{model_id}", params=VERSION)
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_ffdl_status(client: httpx.Client, model_id: str, wanted: str, timeout: float = 90) -> dict[str, Any]:
    """Poll `show` until the FfDL status is `wanted` (fail at once on FAILED)."""

    def reached() -> dict[str, Any] | None:
        body = show(client, model_id)
        status = body["training"]["training_status"]["status"]
        assert status != "FAILED" or wanted == "FAILED", describe(Job.objects.get(pk=model_id), logs=True)
        return body if status == wanted else None

    try:
        return dict(wait_until(reached, timeout, f"model {model_id} to be {wanted}"))
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe(Job.objects.get(pk=model_id), logs=True)}") from None


@pytest.mark.kubesim_only
def test_ffdls_cli_requests_train_halt_resume_download_and_delete_a_model(
    engine: KubeSim, ffdl: tuple[httpx.Client, Any]
) -> None:
    client, tenant = ffdl
    code = zip_directory_bytes({"train.py": TRAIN.encode()})

    # ffdl train manifest.yml model-dir/: POST /v1/models, multipart manifest + model_definition.
    files = {
        "manifest": ("manifest.yml", MANIFEST.encode(), "application/octet-stream"),
        "model_definition": ("dlaas123456", code, "application/octet-stream"),
    }
    trained = client.post("v1/models", params=VERSION, files=files)
    assert trained.status_code == 201, trained.text
    location = trained.headers["Location"]
    assert location.startswith("/v1/models/")
    model_id = location.removeprefix("/v1/models/")  # the CLI's LocationToID
    assert trained.json() == {"model_id": model_id, "location": location}
    job = Job.objects.get(pk=model_id)
    assert job.tenant == tenant and job.code is not None

    # ffdl list / ffdl show: the model runs (PROCESSING) and prints its steps.
    assert [m["model_id"] for m in client.get("v1/models", params=VERSION).json()["models"]] == [model_id]
    wait_ffdl_status(client, model_id, "PROCESSING")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, timeout=60, what="three steps")
    logs = client.get(f"v1/models/{model_id}/logs", params=VERSION)
    assert logs.status_code == 200 and logs.text.startswith("resuming from 0\n"), logs.text

    # ffdl halt: PATCH {"status": "halt"}; the learner saves on SIGTERM and the model is HALTED.
    halted = client.patch(f"v1/models/{model_id}", params=VERSION, json={"status": "halt"})
    assert halted.status_code == 202 and halted.json() == {"model_id": model_id}, halted.text
    body = wait_ffdl_status(client, model_id, "HALTED", timeout=60)
    assert body["training"]["training_status"]["trainyard_status"] == "halted"

    # Trainyard's addition: PATCH {"status": "resume"} sends it on from its checkpoint to COMPLETED.
    resumed = client.patch(f"v1/models/{model_id}", params=VERSION, json={"status": "resume"})
    assert resumed.status_code == 202, resumed.text
    body = wait_ffdl_status(client, model_id, "COMPLETED", timeout=120)
    assert body["training"]["training_status"]["completed"].isdigit()
    assert body["metrics"] and "loss" in body["metrics"][0]["Values"]

    # ffdl logs MODEL_ID (no --follow): GetLogs; with follow=true the finished log ends by itself.
    wait_until(
        lambda: "finished\n" in client.get(f"v1/models/{model_id}/logs", params=VERSION).text,
        timeout=30,
        what="the last line in the log",
    )
    followed = client.get(f"v1/models/{model_id}/logs", params=VERSION | {"follow": "true"})
    assert followed.status_code == 200 and "\nfinished\ntrainyard: uploaded 1 result file" in followed.text
    resumed_from = next(line for line in followed.text.splitlines()[1:] if line.startswith("resuming from"))
    lines = client.get(f"v1/logs/{model_id}/loglines", params={"version": "2017-10-01", "pos": -2}).json()
    assert len(lines["models"]) == 2 and lines["models"][0]["line"] == "finished", lines

    # ffdl download --trainedmodel / --definition.
    model = client.get(f"v1/models/{model_id}/trained_model", params=VERSION)
    assert model.status_code == 200, model.text
    written = zipfile.ZipFile(io.BytesIO(model.content)).read("model.txt").decode()
    start = resumed_from.split()[-1]
    assert start != "0" and written == f"trained, resumed from {start}", written
    definition = client.get(f"v1/models/{model_id}/definition", params=VERSION)
    assert definition.status_code == 200 and definition.content == code

    # ffdl delete: the model and its files are gone; another look is FfDL's 404.
    deleted = client.delete(f"v1/models/{model_id}", params=VERSION)
    assert deleted.status_code == 200 and deleted.json() == {"model_id": model_id}, deleted.text
    gone = client.get(f"v1/models/{model_id}", params=VERSION)
    assert gone.status_code == 404 and gone.json()["code"] == 404
    assert not Job.objects.filter(pk=model_id).exists()
