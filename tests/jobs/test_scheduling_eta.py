"""The scheduling cycle stores each queued job's ETA, learned from finished runs, and clears it on admission."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusterio.capacity import NodeInfo, Resources
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.scheduling import run_cycle
from jobs.services import job_submit
from tenants.models import Tenant
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db

ALLOCATABLE = Resources(0, 8000, 32768)
SPEC = "name: wait\nimage: busybox\ncommand: [echo, hi]\nresources: {cpu: 4, memory: 1Gi}\n"


def _node(free: Resources) -> NodeInfo:
    return NodeInfo("cpu-0", True, None, ALLOCATABLE, free)


def _running(tenant: Tenant, *, name: str = "train", **spec: object) -> Job:
    """A job holding the whole node since 100 s ago."""
    started = timezone.now() - timedelta(seconds=100)
    return make_job(
        tenant, status=JobStatus.RUNNING, placements=["cpu-0"], cpu_millis=8000, memory_mib=1024,
        started_at=started, admitted_at=started, name=name,
        spec={"name": name, "image": "busybox", "command": ["x"], "resources": {}, **spec},
    )  # fmt: skip


def test_a_queued_job_gets_an_eta_from_the_running_jobs_max_runtime_and_loses_it_when_admitted() -> None:
    tenant = make_tenant()
    running = _running(tenant, max_runtime_seconds=600)
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    assert run_cycle(nodes=[_node(Resources(0, 0, 0))]).admitted == []
    job.refresh_from_db()
    assert running.started_at is not None and job.eta is not None
    assert abs((job.eta - (running.started_at + timedelta(seconds=600))).total_seconds()) < 1
    assert job.eta_low == job.eta == job.eta_high and job.eta_reason == ""
    assert "resources reserved for it (from " in job.message and "UTC)" in job.message
    Job.objects.filter(pk=running.pk).update(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    assert run_cycle(nodes=[_node(ALLOCATABLE)]).admitted == [job.pk]
    job.refresh_from_db()
    assert (job.eta, job.eta_low, job.eta_high, job.eta_reason) == (None, None, None, "")


def test_a_running_job_without_max_runtime_ends_at_the_median_of_its_earlier_runs() -> None:
    tenant = make_tenant()
    finished = timezone.now() - timedelta(hours=1)
    for seconds in (200, 300, 1000):
        make_job(
            tenant, name="train", status=JobStatus.SUCCEEDED,
            started_at=finished - timedelta(seconds=seconds), finished_at=finished,
        )  # fmt: skip
    running = _running(tenant)
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    run_cycle(nodes=[_node(Resources(0, 0, 0))])
    job.refresh_from_db()
    assert running.started_at is not None and job.eta is not None
    assert job.eta_low is not None and job.eta_high is not None
    assert abs((job.eta - (running.started_at + timedelta(seconds=300))).total_seconds()) < 1
    assert job.eta_low < job.eta < job.eta_high


def test_a_queued_job_behind_a_job_of_unknown_duration_says_so() -> None:
    tenant = make_tenant()
    _running(tenant, name="fresh")
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    run_cycle(nodes=[_node(Resources(0, 0, 0))])
    job.refresh_from_db()
    assert job.eta is None and job.eta_reason.startswith("unknown: waits on job ")
