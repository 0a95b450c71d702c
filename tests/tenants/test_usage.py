"""Usage accounting: one grouped computation for many tenants, the same figures as one tenant at a time."""

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
