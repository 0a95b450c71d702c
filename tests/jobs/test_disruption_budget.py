"""Disruptions never cost a user's retry: evictions, kubelet rejections, pods lost and launch outages send
the job back to the queue within its own infrastructure budget (INFRA_RETRY_LIMIT), which ends it with
DisruptionBudgetExhausted; `retries` stays whole."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio.capacity import NodeInfo, Resources
from jobs.core.choices import Reason, VerdictState
from jobs.core.podstate import Verdict
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.scheduling import run_cycle
from jobs.services import job_submit
from jobs.services.lifecycle import job_apply_verdict, launch_requeued
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = """
name: disrupted
image: pytorch/pytorch:2.3
command: ["python", "train.py"]
retries: {retries}
resources: {{gpus: 1, cpu: 1, memory: 1Gi}}
"""
ROOM = Resources(4, 16000, 32768)
NODES = [NodeInfo("gpu-0", True, None, ROOM, ROOM)]
EVICTED = Verdict(VerdictState.REQUEUE, "Evicted", "learner 0: The node was low on resource: memory.", 0)


def admitted(retries: int) -> Job:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC.format(retries=retries))
    return readmit(job)


def readmit(job: Job) -> Job:
    assert job.pk in run_cycle(nodes=NODES).admitted
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING
    return job


def test_three_evictions_in_a_row_requeue_a_job_with_retries_0_without_using_one() -> None:
    job = admitted(retries=0)
    for _ in range(3):
        job_apply_verdict(job_id=job.pk, attempt=job.attempt, verdict=EVICTED)
        job.refresh_from_db()
        assert (job.status, job.reason) == (JobStatus.REQUEUED, "Evicted")
        job = readmit(job)
    events = JobEvent.objects.filter(job=job, to_status=JobStatus.REQUEUED)
    assert [e.data for e in events] == [{"counts": False, "infra": True}] * 3


def test_a_launch_that_the_cluster_kept_refusing_requeues_without_a_retry() -> None:
    job = admitted(retries=0)
    launch_requeued(job.pk, job.attempt, Reason.CLUSTER_UNAVAILABLE, "could not launch: 500", infra=True)
    job.refresh_from_db()
    assert (job.status, job.reason) == (JobStatus.REQUEUED, Reason.CLUSTER_UNAVAILABLE)


def test_the_disruption_budget_spent_fails_the_job_with_its_own_reason(settings: Any) -> None:
    settings.INFRA_RETRY_LIMIT = 2
    job = admitted(retries=5)
    for _ in range(2):
        job_apply_verdict(job_id=job.pk, attempt=job.attempt, verdict=EVICTED)
        job = readmit(job)
    job_apply_verdict(job_id=job.pk, attempt=job.attempt, verdict=EVICTED)
    job.refresh_from_db()
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.DISRUPTION_BUDGET_EXHAUSTED)
    assert "INFRA_RETRY_LIMIT" in job.message
    assert not JobEvent.objects.filter(job=job, data__counts=True).exists(), "no user retry was used"
