"""Fair share over time through the scheduler: the snapshot carries each tenant's decayed usage, read
from its jobs' rows, and the cycle lets the tenant that ran least lately go first."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusterio.capacity import NodeInfo, Resources
from jobs.core.fairshare import NONE
from jobs.core.states import JobStatus
from jobs.fairshare import tenants_decayed_usage
from jobs.models import Job
from jobs.scheduling import build_snapshot, run_cycle
from tenants.models import Tenant
from tests.factories import SPEC, make_job, make_tenant

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
ONE_GPU = [NodeInfo("gpu-0", True, None, Resources(1, 64000, 262144), Resources(1, 64000, 262144))]


def job(tenant: Tenant, **fields: Any) -> Job:
    return make_job(tenant, spec={**SPEC, "resources": {}}, **fields)


def ran(tenant: Tenant, start: datetime, end: datetime | None, *, status: str, **fields: Any) -> Job:
    return job(tenant, status=status, started_at=start, finished_at=end, admitted_at=start, **fields)


def test_the_snapshot_carries_decayed_usage_read_from_finished_and_running_jobs(
    settings: Any,
) -> None:
    settings.FAIR_SHARE_HALF_LIFE_SECONDS = 3600
    busy, idle = make_tenant(), make_tenant()
    now = timezone.now()
    # 8 GPUs (2 learners x 4) from two hours ago to one hour ago: 8 x (1/2 - 1/4) = 2.
    ran(busy, now - 2 * HOUR, now - HOUR, status=JobStatus.SUCCEEDED, learners=2, gpus=4, cpu_millis=500)
    # 1 GPU for the last half hour, still running: 1 - 2^-0.5.
    ran(busy, now - HOUR / 2, None, status=JobStatus.RUNNING, gpus=1, cpu_millis=500)
    # Not counted: beyond the horizon; halted (not running now); never started.
    ran(busy, now - 30 * HOUR, now - 20 * HOUR, status=JobStatus.FAILED, gpus=8)
    ran(busy, now - HOUR, None, status=JobStatus.HALTED, gpus=8)
    job(busy, status=JobStatus.CANCELLED, finished_at=now, gpus=8)
    snapshot = build_snapshot(nodes=ONE_GPU, now=now.timestamp())
    decayed = {t.name: t.decayed for t in snapshot.tenants}
    finished, running = 1 / 2 - 1 / 4, 1 - 2**-0.5
    expected = (8 * finished + running, 1000 * finished + 500 * running, 2048 * finished + 1024 * running)
    assert decayed[busy.slug] == pytest.approx(expected)
    assert decayed[idle.slug] == NONE


def test_decayed_usage_is_one_query_for_all_tenants_and_none_while_off(settings: Any) -> None:
    tenants = [make_tenant() for _ in range(3)]
    now = timezone.now()
    for tenant in tenants:
        ran(tenant, now - HOUR, now, status=JobStatus.SUCCEEDED, gpus=1)
    settings.FAIR_SHARE_HALF_LIFE_SECONDS = 0
    with CaptureQueriesContext(connection) as off:
        assert tenants_decayed_usage(tenants=tenants, now=now.timestamp()) == {}
    settings.FAIR_SHARE_HALF_LIFE_SECONDS = 3600
    with CaptureQueriesContext(connection) as on:
        usage = tenants_decayed_usage(tenants=tenants, now=now.timestamp())
    assert len(off) == 0 and len(on) == 1
    assert sorted(usage) == sorted(t.slug for t in tenants)


@pytest.mark.parametrize(("half_life", "first"), [(0, "a-team"), (3600, "b-team")])
def test_the_cycle_lets_the_tenant_that_ran_least_lately_go_first(
    settings: Any, half_life: int, first: str
) -> None:
    settings.FAIR_SHARE_HALF_LIFE_SECONDS = half_life
    a, b = make_tenant("a-team"), make_tenant("b-team")
    now = timezone.now()
    ran(a, now - 3 * HOUR, now - HOUR, status=JobStatus.SUCCEEDED, gpus=1)
    queued = {t.slug: job(t, gpus=1, created_at=now - timedelta(minutes=5)) for t in (a, b)}
    assert run_cycle(nodes=ONE_GPU).admitted == [queued[first].pk]
