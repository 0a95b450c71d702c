"""Borrowing through the scheduler cycle and the write layer: a job admitted above its tenant's nominal
quota is marked borrowed; submit and the namespace ResourceQuota allow what the tenant may borrow."""

from __future__ import annotations

import pytest

from clusterio.capacity import NodeInfo, Resources
from jobs.cluster.podspec import tenant_limits
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.scheduling import run_cycle
from jobs.services import JobRejected, job_submit
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

NODES = [
    NodeInfo(name=f"n{k}", ready=True, gpu_type=None, allocatable=Resources(8, 64000, 262144),
             free=Resources(8, 64000, 262144))
    for k in range(2)
]  # fmt: skip


def spec(gpus: int) -> str:
    return (
        "name: b\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n"
        f"resources: {{gpus: {gpus}, cpu: 1, memory: 1Gi}}\n"
    )


def test_a_job_admitted_above_nominal_quota_is_marked_borrowed_and_says_so() -> None:
    lender = make_tenant(gpus=12)
    borrower = make_tenant(gpus=4, gpus_borrowing_limit=None)
    user = member(borrower)
    first = job_submit(tenant=borrower, user=user, document=spec(4))
    second = job_submit(tenant=borrower, user=user, document=spec(4))
    assert run_cycle(nodes=NODES).admitted == [first.pk, second.pk]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.borrowed) == (JobStatus.STARTING, False)
    assert (second.status, second.borrowed) == (JobStatus.STARTING, True)
    event = second.events.get(to_status=JobStatus.STARTING)
    assert event.data["borrowed"] is True and event.message.endswith("(borrowed quota)")
    assert lender.jobs.count() == 0


def test_without_a_borrowing_limit_the_second_job_waits_at_its_quota() -> None:
    make_tenant(gpus=12)
    tenant = make_tenant(gpus=4)
    user = member(tenant)
    job_submit(tenant=tenant, user=user, document=spec(4))
    waiting = job_submit(tenant=tenant, user=user, document=spec(4))
    run_cycle(nodes=NODES)
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.QUEUED and not waiting.borrowed
    assert waiting.message == "tenant GPU quota 4/4 in use (needs 4)"


def test_other_cohorts_lend_nothing_and_the_wait_reason_says_so() -> None:
    make_tenant(gpus=12, cohort="other")
    make_tenant(gpus=2, cohort="mine")
    tenant = make_tenant(gpus=4, gpus_borrowing_limit=None, cohort="mine")
    user = member(tenant)
    jobs = [job_submit(tenant=tenant, user=user, document=spec(gpus)) for gpus in (4, 2, 2)]
    assert run_cycle(nodes=NODES).admitted == [jobs[0].pk, jobs[1].pk]
    waiting = Job.objects.get(pk=jobs[2].pk)
    assert waiting.status == JobStatus.QUEUED
    assert waiting.message == "tenant over its nominal 4 GPUs and the cohort has none to lend (needs 2)"


def test_submit_accepts_a_job_above_nominal_within_what_the_tenant_may_borrow() -> None:
    make_tenant(gpus=12)
    tenant = make_tenant(gpus=4, gpus_borrowing_limit=4)
    user = member(tenant)
    assert job_submit(tenant=tenant, user=user, document=spec(8)).gpus == 8
    with pytest.raises(
        JobRejected, match=r"needs 9 GPUs in all, the tenant's quota is 4 \(\+4 it may borrow\)"
    ):
        job_submit(tenant=tenant, user=user, document=spec(9))
    assert Job.objects.count() == 1


def test_namespace_quota_allows_nominal_plus_what_the_cohort_can_lend() -> None:
    make_tenant(gpus=12, cpu_millis=1000)
    tenant = make_tenant(gpus=4, cpu_millis=1000, gpus_borrowing_limit=None, cpu_millis_borrowing_limit=500)
    limits = tenant_limits(tenant)
    assert (limits.gpus, limits.cpu_millis, limits.memory_mib) == (16, 1500, 65536)
    plain = make_tenant(gpus=2)
    assert tenant_limits(plain).gpus == 2
