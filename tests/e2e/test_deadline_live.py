"""A job past its max_runtime is stopped as a halt stops it, and keeps what it saved: its learner gets SIGTERM
and its grace period, writes its result on the way out, the launcher uploads RESULT_DIR (the job is still
active, so its token holds), and only once the pod is gone does the job fail, DeadlineExceeded.

Processes: the live daphne server (the artifact endpoints the launcher calls) and, in this process, the job
engine's worker and watcher (the `engine` fixture) on the session's kubesim.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from jobs import cluster
from jobs.models import Job, JobEvent, LogLine, ResultFile
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.clusters import pod_url
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAVE_ON_SIGTERM = """
import os, pathlib, signal, sys, time
def stop(*_):
    (pathlib.Path(os.environ["RESULT_DIR"]) / "model.txt").write_text("saved at the deadline")
    print("saved on SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
time.sleep(300)
"""


def test_a_job_past_its_max_runtime_keeps_the_result_it_saves_on_sigterm_and_fails_deadline_exceeded(
    engine: KubeSim, live_server_url: str, settings: Any
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    tenant = make_tenant()
    document = python_spec("overtime", SAVE_ON_SIGTERM, max_runtime=4)
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    job = wait_status(job, "running", timeout=60)
    [pod] = cluster.job_pods(job)
    assert pod["spec"]["activeDeadlineSeconds"] == 4 + (
        settings.LEARNER_TERMINATION_GRACE_SECONDS + settings.MAX_RUNTIME_BACKSTOP_SECONDS
    ), "the kubelet's deadline is only the backstop"
    started = datetime.fromisoformat(pod["status"]["startTime"]).timestamp()

    job = wait_status(job, "failed", timeout=60, logs=True)
    ended = time.time()
    assert job.reason == "DeadlineExceeded", describe(job, logs=True)
    moves = list(JobEvent.objects.filter(job=job, kind="transition").values_list("to_status", "reason"))
    assert moves[-2:] == [("halting", "DeadlineExceeded"), ("failed", "DeadlineExceeded")], moves
    halted_at = JobEvent.objects.get(job=job, to_status="halting").created_at.timestamp()
    # Stopped at its max_runtime (the startTime has whole seconds), not at a reconcile pass 30 s later.
    assert 3.0 <= halted_at - started <= 4 + 2.5, halted_at - started
    assert ended - started < 4 + settings.LEARNER_TERMINATION_GRACE_SECONDS

    result = ResultFile.objects.get(job=job, path="model.txt")
    assert result.attempt == 1 and result.size == len("saved at the deadline")
    texts = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert texts[:2] == ["training", "saved on SIGTERM"], texts
    assert any("uploaded 1 result file(s)" in text for text in texts), texts
    wait_until(lambda: not cluster.job_pods(Job.objects.get(pk=job.pk)), what="the pod to be gone")


def test_a_20_mb_line_without_a_newline_is_stored_cut_with_a_marker_and_the_launchers_line_is_kept(
    engine: KubeSim, live_server_url: str, settings: Any
) -> None:
    settings.ARTIFACTS_BASE_URL = pod_url(engine, live_server_url)
    tenant = make_tenant()
    script = "import sys\nsys.stdout.write('x' * 20_000_000)\nsys.stdout.flush()\n"
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("one-huge-line", script))
    job = wait_status(job, "succeeded", timeout=120, logs=True)
    texts = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert len(texts) == 2, [text[:80] for text in texts]
    assert len(texts[0]) == 8192 and texts[0].startswith("x" * 8000)
    assert texts[0].endswith(
        "[trainyard] line cut here: it was 20000000 characters long, over the 8192 stored"
    )
    assert texts[1] == "trainyard: uploaded 0 result file(s), 0 bytes"
