"""The engine end to end on kubesim: submit → admitted → pods → running → logs stored → finished.

Real parts throughout: PostgreSQL, a Celery worker on the Redis broker, the official Kubernetes client
over HTTP against kubesim, whose kubelet runs each learner's command as a local process.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from jobs.models import Job, JobEvent, Learner, LogLine, MetricSample
from jobs.services import job_cancel, job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def spec(name: str, script: str, **extra: Any) -> str:
    document = {
        "name": name,
        "image": "python:3.11",
        "command": ["python", "-u", "-c", script],
        "resources": {"cpu": "500m", "memory": "256Mi"},
        **extra,
    }
    return json.dumps(document)


def submit(document: str, role: str = "member") -> tuple[Job, Any]:
    tenant = make_tenant()
    user = member(tenant, role)
    return job_submit(tenant=tenant, user=user, document=document), user


def test_job_runs_to_success_with_its_log_and_metrics_stored(engine: KubeSim) -> None:
    script = (
        "import json\nfor i in range(5):\n"
        "    print(json.dumps({'metric': 'loss', 'value': 1/(i+1), 'step': i}))\nprint('done')"
    )
    job, _ = submit(spec("hello", script))
    job = wait_status(job, "succeeded")
    lines = list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", "text"))
    assert [text for _, text in lines][-1] == "done"
    assert [seq for seq, _ in lines] == list(range(1, len(lines) + 1))
    assert MetricSample.objects.filter(job=job, name="loss").count() == 5
    reasons = list(job.events.values_list("reason", flat=True))
    assert reasons[0] == "Submitted" and "Admitted" in reasons and reasons[-1] == "Completed"
    learner = job.learner_set.get()
    assert learner.phase == "Succeeded" and learner.exit_code == 0 and learner.node


def test_ffdl_regex_extractor_turns_free_form_log_lines_into_metrics(engine: KubeSim) -> None:
    script = (
        "for i in range(4):\n    print(f'I1203 solver.cpp:228] Iteration {i * 10}, loss = {1 / (i + 1):.4f}')"
    )
    metrics = {
        "type": "regex_extractor",
        "groups": {
            "train": {
                "regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+)",
                "meta": {"time": "iteration"},
                "values": ["loss"],
            }
        },
    }
    job, _ = submit(spec("caffe-style", script, evaluation_metrics=metrics))
    job = wait_status(job, "succeeded")
    points = list(
        MetricSample.objects.filter(job=job).order_by("log_seq").values_list("name", "step", "value")
    )
    assert points == [("loss", 0, 1.0), ("loss", 10, 0.5), ("loss", 20, 0.3333), ("loss", 30, 0.25)]


def test_an_ffdl_manifest_with_a_heredoc_of_indented_python_runs_as_written(engine: KubeSim) -> None:
    manifest = """\
name: heredoc
description: indented Python fed to the interpreter by a here-document
version: "1.0"
cpus: 0.25
memory: 256MiB
learners: 1
framework:
  name: custom
  version: "python:3.11"
  command: |
    echo starting
    python -u - <<'EOF'
    total = 0
    for step in range(3):
        total += step
        if step:
            print(f"step {step} total {total}")
    print("done")
    EOF
"""
    job, _ = submit(manifest)
    job = wait_status(job, "succeeded")
    lines = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert [line for line in lines if not line.startswith("[trainyard]")] == [
        "starting",
        "step 1 total 1",
        "step 2 total 3",
        "done",
    ], describe(job, logs=True)


def test_failing_command_fails_with_exit_code_and_log_tail(engine: KubeSim) -> None:
    script = "import sys\nfor i in range(30):\n    print(f'line {i}')\nsys.exit(3)"
    job, _ = submit(spec("boom", script))
    job = wait_status(job, "failed")
    assert job.reason == "ExitCode3"
    event = job.events.get(to_status="failed")
    assert event.data["log_tail"] == [f"line {i}" for i in range(10, 30)]


def test_out_of_memory_fails_with_oomkilled(engine: KubeSim) -> None:
    script = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 2**20))"
    job, _ = submit(spec("hog", script, resources={"cpu": "500m", "memory": "64Mi"}))
    job = wait_status(job, "failed", timeout=90)
    assert job.reason == "OOMKilled"
    assert "memory" in job.message


def test_cancel_while_running_stops_the_pods(engine: KubeSim) -> None:
    job, user = submit(spec("sleeper", "import time\nprint('up', flush=True)\ntime.sleep(120)"))
    wait_status(job, "running")
    job_cancel(job=job, user=user)
    job = wait_status(job, "cancelled", timeout=60)
    assert "CancelledByUser" in job.events.values_list("reason", flat=True)


def test_cancel_while_queued_never_launches(engine: KubeSim) -> None:
    tenant = make_tenant(max_running_jobs=1)
    user = member(tenant)
    first = job_submit(tenant=tenant, user=user, document=spec("first", "import time\ntime.sleep(120)"))
    wait_status(first, "starting", "running")
    second = job_submit(tenant=tenant, user=user, document=spec("second", "print(1)"))
    time.sleep(1)
    second.refresh_from_db()
    assert second.status == "queued" and "running-job limit" in second.message
    job_cancel(job=second, user=user)
    second.refresh_from_db()
    assert second.status == "cancelled" and second.attempt == 0
    job_cancel(job=first, user=user)
    wait_status(first, "cancelled")


@pytest.mark.kubesim_only
def test_a_job_asking_for_a100_runs_on_a_node_labelled_with_the_full_product_name(engine: KubeSim) -> None:
    """`gpu_type: a100` matches `nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB` through the default aliases,
    at submit, in admission and in the pod's node affinity: kubesim's scheduler, which would bin-pack the pod
    onto the decoy (as many free GPUs, first by name), enforces it."""
    engine.add_gpu_node("a000-decoy-0", gpus=1, labels={"nvidia.com/gpu.product": "Decoy-GPU"})
    engine.add_gpu_node("a100-sxm4-0", gpus=1, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    try:
        resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "a100"}
        job, _ = submit(spec("on-a100", "print('on an A100')", resources=resources))
        job = wait_status(job, "succeeded", timeout=60, logs=True)
        assert job.placements == ["a100-sxm4-0"], describe(job)
        assert list(Learner.objects.filter(job=job).values_list("node", flat=True)) == ["a100-sxm4-0"]
        assert list(LogLine.objects.filter(job=job).values_list("text", flat=True)) == ["on an A100"]
    finally:
        engine.lose_node("a100-sxm4-0")
        engine.lose_node("a000-decoy-0")


@pytest.mark.kubesim_only
def test_node_lost_requeues_and_resumes_from_checkpoint(engine: KubeSim) -> None:
    engine.add_gpu_node("lossy-0", gpus=1, labels={"nvidia.com/gpu.product": "Lossy-GPU"})
    resources = {"cpu": "500m", "memory": "256Mi", "gpus": 1, "gpu_type": "Lossy-GPU"}
    job, _ = submit(spec("survivor", CHECKPOINTED, resources=resources))
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 5, what="five steps")
    engine.lose_node("lossy-0")
    wait_until(lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(), what="a requeue")
    engine.add_gpu_node("lossy-1", gpus=1, labels={"nvidia.com/gpu.product": "Lossy-GPU"})
    job = wait_status(job, "succeeded", timeout=90)
    assert job.attempt == 2
    requeue = job.events.get(to_status="requeued")
    assert requeue.reason == "DeletionByPodGC", describe(job)  # pod GC of the deleted node's pods
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 5
    steps = sorted(
        s or 0 for s in MetricSample.objects.filter(job=job, attempt=2).values_list("step", flat=True)
    )
    assert steps[0] >= 5 and steps[-1] == 29  # CHECKPOINTED counts steps 0..29
