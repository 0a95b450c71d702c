"""Every template of the submit page, and the examples that are not templates, really run on a `make up` setup:
logged in as `demo` (seed_demo: its quota, its policy allowing the embedded S3, its data-store secret
`demo-s3`), each is submitted from the submit page as it comes (the train-cpu template with the code the page
attaches, with-code.yaml with examples/model uploaded as its ZIP, tensorboard.yaml with examples/tensorboard,
whose scalars become metrics), and each succeeds on kubesim; the job page shows it. The embedded S3 is the
same moto server `make up` runs (`portal.demo_s3`), started here on a free port: the demo secret carries
where pods reach it (pytorch-single.yaml names only the secret), and the only edit to a spec is that address
in the FfDL manifest's `auth_url` (FfDL's format names the store's URL).
"""

from __future__ import annotations

import functools
import io
import re
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.test import override_settings
from playwright.sync_api import expect

from jobs.artifacts.code import zip_directory_bytes
from jobs.core.states import TERMINAL
from jobs.forms import TEMPLATES
from jobs.models import Job, LogLine, MetricSample
from kubesim.testing import KubeSim
from portal import demo_s3
from tests.clusters import pod_url
from tests.e2e.conftest import ROOT, login
from tests.jobs.engine import describe, wait_until

pytestmark = pytest.mark.slow

DEMO_ENDPOINT = "http://host.kubesim.internal:9000"
JOB_URL = re.compile(r"/jobs/[a-z0-9]+/$")
# What each job prints when it is done (the learners' last lines), by job name.
DONE = {
    "demo-mlp": "training done",
    "ddp-two-learners": "learner 1/2: training done",
    "ffdl-pytorch-regression": "training done",
    "train-cpu": "training done",
    "regression-single-gpu": "training done",
    "mlp-from-disk": "training done; model in RESULT_DIR",
    "tensorboard-scalars": "training done",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def embedded_s3() -> Iterator[str]:
    """`make up`'s embedded S3 (moto's ThreadedMotoServer with the demo bucket), on a free port; stopped after."""
    with demo_s3.demo_s3("127.0.0.1", _free_port()) as url:
        yield url


@pytest.fixture
def demo(live_page: Any, settings: Any, live_server_url: str, engine: KubeSim, embedded_s3: str) -> None:
    """seed_demo's logins, tenant, policy and secret (whose endpoint is where pods reach this test's S3, as
    `make up`'s is where they reach its own); the pods fetch code from the live server."""
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    pod_s3 = urlsplit(pod_url(engine, embedded_s3))
    settings.S3_DEMO_POD_HOST, settings.S3_DEMO_POD_PORT = pod_s3.hostname, pod_s3.port
    with override_settings(LOCAL_SETUP=True):
        call_command("seed_demo", stdout=io.StringIO())


def _submit(page: Any, text: str, s3_url: str, *, template: str = "", code: bytes | None = None) -> Job:
    page.goto(f"/jobs/new/?template={template}" if template else "/jobs/new/")
    if text:
        page.fill("#id_spec", text)
    editor = page.locator("#id_spec")
    spec = editor.input_value()
    assert spec.strip(), template
    if DEMO_ENDPOINT in spec:
        page.fill("#id_spec", spec.replace(DEMO_ENDPOINT, s3_url))
    if code is not None:
        page.set_input_files(
            "#id_code", files=[{"name": "model.zip", "mimeType": "application/zip", "buffer": code}]
        )
    before = set(Job.objects.values_list("pk", flat=True))
    page.click("button[name=submit]")
    page.wait_for_url(JOB_URL)
    return Job.objects.exclude(pk__in=before).get()


def test_each_template_and_example_submitted_from_the_page_succeeds(
    live_page: Any, demo: None, embedded_s3: str, engine: KubeSim
) -> None:
    page = live_page
    s3_url = pod_url(engine, embedded_s3)
    login(page, "demo", "demo")
    jobs: list[Job] = []
    for template in TEMPLATES:
        page.goto(f"/jobs/new/?template={template.key}")
        note = page.locator("#template-code")
        if template.code is not None:
            expect(note).to_contain_text("examples/train")
        else:
            expect(note).to_be_hidden()
        jobs.append(_submit(page, "", s3_url, template=template.key))
    single = (ROOT / "examples/specs/pytorch-single.yaml").read_text()
    jobs.append(_submit(page, single, s3_url))
    model = ROOT / "examples/model"
    code = zip_directory_bytes({p.name: p.read_bytes() for p in model.glob("*.py")})
    with_code = (ROOT / "examples/specs/with-code.yaml").read_text()
    jobs.append(_submit(page, with_code, s3_url, code=code))
    scalars = ROOT / "examples/tensorboard"
    code = zip_directory_bytes({p.name: p.read_bytes() for p in scalars.glob("*.py")})
    jobs.append(_submit(page, (ROOT / "examples/specs/tensorboard.yaml").read_text(), s3_url, code=code))
    assert sorted(j.name for j in jobs) == sorted(DONE)
    assert Job.objects.get(name="train-cpu").code is not None  # the template's code, attached by the page

    for job in jobs:
        wait_until(functools.partial(_finished, job), timeout=420, what=f"{job.name} to finish")
        assert job.status == "succeeded", describe(job, logs=True)
        texts = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
        assert DONE[job.name] in texts, (job.name, texts[-5:])
    for name in ("regression-single-gpu", "ffdl-pytorch-regression"):
        log = " ".join(LogLine.objects.filter(job__name=name).values_list("text", flat=True))
        assert f"read {demo_s3.ROWS} rows" in log, (name, log[:300])
    tensorboard = Job.objects.get(name="tensorboard-scalars")
    wait_until(
        lambda: (
            {"train/loss", "train/lr", "eval/loss"}
            <= set(MetricSample.objects.filter(job=tensorboard).values_list("name", flat=True))
        ),
        # The pieces are parsed by the tensorboard queue's worker: beside three other test workers and a
        # benchmark loop, 60 s was not always enough.
        timeout=180,
        what="the TensorBoard example's scalars to become metrics",
    )
    page.goto(f"/jobs/{jobs[0].pk}/")
    expect(page.locator("#job-status .badge")).to_have_text("Succeeded")


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.status in TERMINAL
