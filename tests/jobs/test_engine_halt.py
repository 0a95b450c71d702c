"""Halt and resume end to end on kubesim through the official client: a running learner that checkpoints
is halted, gets SIGTERM and saves within its grace period; the job is halted once its pod is gone, the
tenant's usage drops to nothing while its checkpoint claim stays; resumed, it goes on from that checkpoint
in a new attempt, without using a retry, and succeeds."""

from __future__ import annotations

import pytest

from jobs import cluster
from jobs.models import JobEvent, LogLine, MetricSample
from jobs.services import job_halt, job_resume, job_submit
from kubesim.testing import KubeSim
from tenants.usage import tenant_usage
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until
from tests.jobs.test_engine_checkpoints import claims_of, delete_and_wait_for_the_claims_to_go

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A learner that checkpoints each step and, told to stop (SIGTERM), saves where it is and exits 0: the exit
# code of a graceful stop, which must not pass for the end of training.
GRACEFUL = """
import json, os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"resuming from {start}", flush=True)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(True))
for step in range(start, 80):
    if told:
        print(f"stopping after step {step}", flush=True)
        sys.exit(0)
    time.sleep(0.1)
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step + 1))
    os.replace(tmp, ck)
    print(json.dumps({"metric": "loss", "value": 1 / (step + 1), "step": step}), flush=True)
print("finished", flush=True)
"""


def test_a_halted_job_frees_its_quota_keeps_its_checkpoint_and_resumes_from_it(engine: KubeSim) -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=python_spec("halted", GRACEFUL, retries=0))
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
    assert tenant_usage(tenant).cpu_millis == 250

    assert job_halt(job=job, user=user).status == "halting"
    job = wait_status(job, "halted", timeout=60, logs=True)
    assert job.attempt == 1 and job.reason == "Halted", describe(job)
    assert not cluster.job_pods(job), "halted only once its pods are gone"
    assert tenant_usage(tenant).cpu_millis == 0 and tenant_usage(tenant).running_jobs == 0
    assert [c["phase"] for c in claims_of(job)] == ["Bound"], "the checkpoint claim stays"
    stopped = wait_until(
        lambda: LogLine.objects.filter(job=job, attempt=1, text__startswith="stopping after step").first(),
        timeout=30,
        what="the learner's last words after SIGTERM",
    )

    assert job_resume(job=job, user=user).status == "requeued"
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    assert job.attempt == 2
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) == int(stopped.text.split()[-1]) >= 3, describe(job, logs=True)
    assert LogLine.objects.filter(job=job, text="finished").count() == 1
    moves = list(
        JobEvent.objects.filter(job=job, kind="transition").order_by("pk").values_list("to_status", "reason")
    )
    assert ("halting", "HaltedByUser") in moves and ("requeued", "Resumed") in moves, moves
    assert not JobEvent.objects.filter(job=job, to_status="failed").exists()
    delete_and_wait_for_the_claims_to_go(job)
