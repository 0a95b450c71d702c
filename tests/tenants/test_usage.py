"""Usage accounting: one grouped computation for many tenants, the same figures as one tenant at a time."""

from typing import Any

import pytest

from common.resources import Resources
from jobs.core.states import JobStatus
from tenants.usage import Usage, tenant_usage, usage_by_tenant
from tests.factories import make_job, make_tenant

pytestmark = pytest.mark.django_db


def test_usage_by_tenant_sums_jobs_holding_resources_and_counts_waiting_ones() -> None:
    busy, idle = make_tenant(), make_tenant()
    make_job(busy, status=JobStatus.RUNNING, learners=2, gpus=1, cpu_millis=1000, memory_mib=2048)
    make_job(busy, status=JobStatus.STARTING, learners=1, gpus=4, cpu_millis=500, memory_mib=1024)
    make_job(busy, status=JobStatus.CANCELLING, learners=3, gpus=0, cpu_millis=100, memory_mib=10)
    make_job(busy, status=JobStatus.QUEUED)
    make_job(busy, status=JobStatus.REQUEUED)
    make_job(busy, status=JobStatus.SUCCEEDED, learners=8, gpus=8)
    make_job(idle, status=JobStatus.FAILED, learners=8, gpus=8)
    usage = usage_by_tenant([busy, idle])
    assert usage[busy.pk] == Usage(held=Resources(6, 2800, 5150), running_jobs=3, queued_jobs=2)
    assert (usage[busy.pk].gpus, usage[busy.pk].cpu_millis, usage[busy.pk].memory_mib) == (6, 2800, 5150)
    assert usage[idle.pk] == Usage()
    assert tenant_usage(busy) == usage[busy.pk] and tenant_usage(idle) == usage[idle.pk]


def test_claims_count_for_every_launched_job_until_deleted_halted_and_finished_ones_included(
    settings: Any,
) -> None:
    settings.CHECKPOINT_CLAIM_SIZE, settings.CHECKPOINT_ACCESS_MODE = "10Gi", "ReadWriteOnce"
    tenant = make_tenant()
    make_job(tenant, status=JobStatus.HALTED, attempt=1, learners=8)
    make_job(tenant, status=JobStatus.HALTED, attempt=2, learners=8)
    make_job(tenant, status=JobStatus.RUNNING, attempt=1, learners=2)
    make_job(tenant, status=JobStatus.REQUEUED, attempt=1, learners=1)
    make_job(tenant, status=JobStatus.SUCCEEDED, attempt=1, learners=1)
    make_job(tenant, status=JobStatus.HALTED, attempt=0, learners=4)  # halted while queued: no claims yet
    make_job(tenant, status=JobStatus.QUEUED, attempt=0, learners=4)
    make_job(tenant, status=JobStatus.CANCELLED, attempt=0, learners=4)
    usage = tenant_usage(tenant)
    assert (usage.claims, usage.storage_gib) == (20, 200)
    assert usage.held == Resources(0, 2000, 2048)  # the halted jobs hold no GPUs, CPU or memory


def test_shared_claims_count_one_per_job_and_none_without_claims(settings: Any) -> None:
    settings.CHECKPOINT_CLAIM_SIZE, settings.CHECKPOINT_ACCESS_MODE = "1500Mi", "ReadWriteMany"
    tenant = make_tenant()
    make_job(tenant, status=JobStatus.HALTED, attempt=1, learners=8)
    make_job(tenant, status=JobStatus.FAILED, attempt=3, learners=2)
    assert (tenant_usage(tenant).claims, tenant_usage(tenant).storage_gib) == (2, 4)  # 1500Mi is 2 GiB each
    settings.CHECKPOINT_CLAIM_SIZE = ""
    assert (tenant_usage(tenant).claims, tenant_usage(tenant).storage_gib) == (0, 0)
