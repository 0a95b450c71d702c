"""Checkpoint claims end to end on kubesim: with CHECKPOINT_ACCESS_MODE ReadWriteOnce (the default) each
learner of a two-learner job gets a claim of its own in the cluster's default class (kubesim's `standard`,
ReadWriteOnce only, like local-path), which binds; a requeued attempt's learner i resumes from learner i's
folder; deleting the job deletes every claim. With ReadWriteMany on a class that offers it the learners
share one claim.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from clusterio import names
from jobs import cluster, tasks
from jobs.models import Job, JobEvent, LogLine, MetricSample
from jobs.services import job_delete, job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Each learner checkpoints its step in CHECKPOINT_DIR and notes whose folder it is on first use.
PER_LEARNER = """
import json, os, pathlib, time
folder = pathlib.Path(os.environ["CHECKPOINT_DIR"])
rank = os.environ["RANK"]
owner = folder / "owner"
if not owner.exists():
    owner.write_text(rank)
ck = folder / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"rank {rank} resuming from {start} in the folder of rank {owner.read_text()}", flush=True)
for step in range(start, 60):
    time.sleep(0.1)
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step + 1))
    os.replace(tmp, ck)
    print(json.dumps({"metric": "loss", "value": 1 / (step + 1), "step": step}), flush=True)
print("finished", flush=True)
"""

# Each learner leaves a file and waits to see the other's: only a shared folder shows both.
SHARED = """
import os, pathlib, time
folder = pathlib.Path(os.environ["CHECKPOINT_DIR"])
rank = int(os.environ["RANK"])
(folder / f"rank-{rank}").write_text("here")
deadline = time.monotonic() + 30
while not (folder / f"rank-{1 - rank}").exists():
    assert time.monotonic() < deadline, "the other learner's file never showed up"
    time.sleep(0.1)
print(f"rank {rank} sees rank {1 - rank}", flush=True)
"""


def submit(document: str) -> Job:
    tenant = make_tenant()
    return job_submit(tenant=tenant, user=member(tenant), document=document)


def claims_of(job: Job) -> list[dict[str, Any]]:
    """The job's checkpoint claims that are not going, by name."""
    client = cluster.cluster()
    found = client.core.list_namespaced_persistent_volume_claim(
        cluster.namespace_for(job.tenant), label_selector=client.selector(names.job_selector(job.pk))
    ).items
    return sorted(
        (
            {
                "name": c.metadata.name,
                "modes": c.spec.access_modes,
                "class": c.spec.storage_class_name,
                "phase": c.status.phase,
            }
            for c in found
            if c.metadata.deletion_timestamp is None
        ),
        key=lambda c: str(c["name"]),
    )


def delete_and_wait_for_the_claims_to_go(job: Job) -> None:
    assert job.owner is not None
    job_delete(job=job, user=job.owner)
    wait_until(lambda: not claims_of(job), timeout=30, what="the job's claims to go")


def test_two_learners_each_resume_from_a_readwriteonce_claim_of_their_own(engine: KubeSim) -> None:
    job = submit(python_spec("per-learner", PER_LEARNER, learners=2, retries=1))
    wait_status(job, "running", timeout=60)
    wait_until(
        lambda: MetricSample.objects.filter(job=job, attempt=1, learner=1).count() >= 3,
        what="three steps of learner 1",
    )
    [pod] = [
        p
        for p in cluster.job_pods(job)
        if cluster.pod_learner(p) == 1 and not p["metadata"].get("deletionTimestamp")
    ]
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace))
    cluster.cluster().core.create_namespaced_pod_eviction(name, namespace, eviction)
    requeue = wait_until(
        lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(), timeout=30, what="a requeue"
    )
    assert requeue.data == {"counts": False, "infra": True}, describe(job)
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    assert job.attempt == 2
    for learner in (0, 1):
        resumed = LogLine.objects.get(job=job, attempt=2, learner=learner, text__contains="resuming from")
        words = resumed.text.split()
        assert words[-1] == str(learner), f"learner {learner} mounted another learner's claim: {resumed.text}"
        assert int(words[4]) >= (3 if learner == 1 else 1), resumed.text
    assert claims_of(job) == [
        {"name": f"ty-{job.pk}-ckpt-{i}", "modes": ["ReadWriteOnce"], "class": "standard", "phase": "Bound"}
        for i in (0, 1)
    ]
    delete_and_wait_for_the_claims_to_go(job)


def test_two_learners_share_one_readwritemany_claim_when_configured(engine: KubeSim, settings: Any) -> None:
    settings.CHECKPOINT_ACCESS_MODE = "ReadWriteMany"
    settings.CHECKPOINT_STORAGE_CLASS = "kubesim-shared"
    job = submit(python_spec("shared", SHARED, learners=2))
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    texts = set(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert {"rank 0 sees rank 1", "rank 1 sees rank 0"} <= texts, texts
    assert claims_of(job) == [
        {"name": f"ty-{job.pk}-ckpt", "modes": ["ReadWriteMany"], "class": "kubesim-shared", "phase": "Bound"}
    ]
    delete_and_wait_for_the_claims_to_go(job)


@pytest.mark.kubesim_only  # kubesim's default class binds Immediately; kind's local-path waits for a consumer
def test_a_claim_its_class_cannot_serve_is_named_in_the_jobs_reason_and_fails_it_at_the_limit(
    engine: KubeSim, settings: Any
) -> None:
    # ReadWriteMany asked of the default class, which (like local-path) lacks it: the claim stays Pending.
    settings.CHECKPOINT_ACCESS_MODE = "ReadWriteMany"
    settings.CHECKPOINT_STORAGE_CLASS = ""
    settings.PENDING_TIMEOUT_LIMIT = 1
    job = submit(python_spec("misconfigured", "print('never')", learners=2))
    wait_until(
        lambda: JobEvent.objects.filter(job=job, kind="pod", reason="Unschedulable").first(),
        what="the Unschedulable event",
    )
    job.refresh_from_db()
    claim = f"claim ty-{job.pk}-ckpt is Pending (ReadWriteMany in class standard)"
    assert job.status == "starting" and claim in job.message, describe(job)
    assert "PersistentVolumeClaims" in job.message, "the scheduler's own words stay"

    settings.PENDING_TIMEOUT_SECONDS = 0
    assert tasks.reconcile()["requeued"] == 1
    job = wait_status(job, "failed")
    assert job.reason == "Unschedulable" and claim in job.message, describe(job)
