"""Preemption end to end on kubesim through the official client: a tenant that lent its GPUs submits a job;
the scheduler stops the borrower's borrowed job (SIGTERM: it saves a checkpoint and says so), which goes
back to the queue without using a retry; the lender's job starts and succeeds; the borrower's job resumes
from its checkpoint in a new attempt once there is room again, keeps every log line, and succeeds."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, JobEvent, LogLine
from jobs.services import job_cancel, job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Trains STEPS steps, saving a checkpoint after each and reporting it; told to stop (SIGTERM), it saves
# where it is, reports that checkpoint and exits.
TRAINER = """
import json, os, pathlib, signal, sys, time
STEPS = {steps}
ck = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"resuming from {{start}}", flush=True)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(True))
step = start
while STEPS is None or step < STEPS:
    if told:
        print(json.dumps({{"checkpoint": step}}), flush=True)
        print(f"stopping at {{step}}", flush=True)
        sys.exit(0)
    time.sleep(0.05)
    step += 1
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step))
    os.replace(tmp, ck)
    print(json.dumps({{"checkpoint": step}}), flush=True)
print("finished", flush=True)
"""


def trainer(name: str, steps: int | None) -> str:
    return python_spec(
        name, TRAINER.format(steps=steps), retries=0, resources={"cpu": "250m", "memory": "128Mi", "gpus": 2}
    )


def test_a_lender_preempts_a_borrower_which_resumes_from_its_checkpoint_and_succeeds(
    engine: KubeSim, settings: Any
) -> None:
    settings.PREEMPTION_MIN_RUNTIME_SECONDS = 0
    lender = make_tenant(gpus=2)
    borrower = make_tenant(gpus=2, gpus_borrowing_limit=None)
    b_user, a_user = member(borrower), member(lender)
    steady = job_submit(tenant=borrower, user=b_user, document=trainer("steady", None))
    wait_status(steady, "running", timeout=60)
    borrowed = job_submit(tenant=borrower, user=b_user, document=trainer("borrowed", 300))
    borrowed = wait_status(borrowed, "running", timeout=60)
    assert borrowed.borrowed, describe(borrowed)
    wait_until(
        lambda: LogLine.objects.filter(job=borrowed, text__startswith='{"checkpoint"').count() >= 5,
        what="five checkpoints",
    )

    mine = job_submit(tenant=lender, user=a_user, document=trainer("mine", 3))
    mine = wait_status(mine, "succeeded", timeout=90, logs=True)
    preempted = JobEvent.objects.get(job=borrowed, to_status="halting")
    assert preempted.reason == "Preempted" and preempted.data["by_tenant"] == lender.slug, describe(borrowed)
    assert mine.pk not in preempted.message
    assert JobEvent.objects.filter(job=mine, reason="Preempting").exists()
    assert Job.objects.get(pk=steady.pk).status == "running", "the job within b's nominal quota runs on"

    borrowed = wait_status(borrowed, "succeeded", timeout=120, logs=True)
    assert borrowed.attempt == 2
    stopped = LogLine.objects.get(job=borrowed, attempt=1, text__startswith="stopping at")
    resumed = LogLine.objects.get(job=borrowed, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) == int(stopped.text.split()[-1]) > 0, describe(borrowed, logs=True)
    seqs = list(LogLine.objects.filter(job=borrowed, learner=0).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)), "every line of both attempts kept, in order"
    assert LogLine.objects.filter(job=borrowed, text="finished").count() == 1
    moves = list(
        JobEvent.objects.filter(job=borrowed, kind="transition")
        .order_by("pk")
        .values_list("to_status", "reason")
    )
    assert ("requeued", "Preempted") in moves and not any(s == "failed" for s, _ in moves), moves
    assert JobEvent.objects.get(job=borrowed, to_status="requeued").data["counts"] is False

    job_cancel(job=steady, user=b_user)
    wait_status(steady, "cancelled", "succeeded", timeout=60)  # it exits 0 after its last save
