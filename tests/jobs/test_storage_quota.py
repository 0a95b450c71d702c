"""Storage is quota (services and the scheduler cycle): checkpoint claims count for every launched job until
it is deleted, halted ones included; a job whose claims would pass the tenant's storage or claim quota waits
with the reason, one that could never fit is refused at submit, and the namespace ResourceQuota carries both."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio.capacity import NodeInfo, Resources
from jobs.cluster.podspec import tenant_limits
from jobs.core.eta import NO_CLAIM_STORAGE
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.scheduling import job_dry_run, run_cycle
from jobs.services import JobRejected, job_submit
from tenants.usage import tenant_usage
from tests.factories import make_job, make_tenant, make_user, member

pytestmark = pytest.mark.django_db

NODES = [
    NodeInfo(name="n1", ready=True, gpu_type=None, allocatable=Resources(8, 64000, 262144),
             free=Resources(8, 64000, 262144))
]  # fmt: skip


@pytest.fixture(autouse=True)
def _claims(settings: Any) -> None:
    settings.CHECKPOINT_CLAIM_SIZE, settings.CHECKPOINT_ACCESS_MODE = "10Gi", "ReadWriteOnce"
    settings.CHECKPOINT_HOST_ROOT = ""


def spec(learners: int) -> str:
    return (
        "name: s\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n"
        f"learners: {learners}\nresources: {{cpu: 0.1, memory: 128Mi}}\n"
    )


def test_two_halted_eight_learner_jobs_hold_their_claims_and_a_third_waits_for_storage() -> None:
    tenant = make_tenant(storage_gib=200, max_claims=20)
    user = member(tenant)
    for _ in range(2):
        make_job(tenant, user, status=JobStatus.HALTED, attempt=1, learners=8, cpu_millis=100, memory_mib=128)
    usage = tenant_usage(tenant)
    assert (usage.claims, usage.storage_gib, usage.held.cpu_millis) == (16, 160, 0)
    third = job_submit(tenant=tenant, user=user, document=spec(8))
    assert run_cycle(nodes=NODES).admitted == []
    third.refresh_from_db()
    assert third.status == JobStatus.QUEUED
    assert third.message == (
        "tenant storage quota: checkpoint claims 16+8 would exceed 20 "
        "(halted and finished jobs keep their claims until deleted)"
    )
    assert third.eta is None and third.eta_reason == NO_CLAIM_STORAGE  # no job's end frees claims
    small = job_submit(tenant=tenant, user=user, document=spec(4))  # behind the third: the queue is strict
    assert run_cycle(nodes=NODES).admitted == []
    Job.objects.filter(status=JobStatus.HALTED).delete()  # as job_delete does once the claims are gone
    assert run_cycle(nodes=NODES).admitted == [third.pk, small.pk]
    assert (tenant_usage(tenant).claims, tenant_usage(tenant).storage_gib) == (12, 120)


def test_a_resumed_job_is_not_held_back_by_the_claims_it_already_holds() -> None:
    tenant = make_tenant(storage_gib=80, max_claims=8)
    job = make_job(tenant, status=JobStatus.REQUEUED, attempt=1, learners=8, cpu_millis=100, memory_mib=128)
    assert tenant_usage(tenant).claims == 8
    assert run_cycle(nodes=NODES).admitted == [job.pk]


def test_submit_refuses_a_job_whose_claims_alone_pass_the_storage_quota() -> None:
    tenant = make_tenant(storage_gib=50, max_claims=4)
    with pytest.raises(JobRejected) as refused:
        job_submit(tenant=tenant, user=member(tenant), document=spec(8))
    assert refused.value.errors == {
        "resources": [
            "can never run: needs 8 checkpoint claims, the tenant's claim quota is 4",
            "can never run: needs 80 GiB of checkpoint claims, the tenant's storage quota is 50 GiB",
        ]
    }
    assert not Job.objects.exists()


def test_without_checkpoint_claims_storage_quota_stops_nothing(settings: Any) -> None:
    settings.CHECKPOINT_CLAIM_SIZE = ""
    tenant = make_tenant(storage_gib=0, max_claims=0)
    job = job_submit(tenant=tenant, user=member(tenant), document=spec(8))
    assert run_cycle(nodes=NODES).admitted == [job.pk]


def test_the_dry_run_says_a_job_waits_for_storage() -> None:
    tenant = make_tenant(storage_gib=100, max_claims=20)
    user = member(tenant)
    make_job(tenant, user, status=JobStatus.SUCCEEDED, attempt=1, learners=8)
    result = job_dry_run(tenant=tenant, user=user, document=spec(4), nodes=(NODES, ""))
    assert not result.starts
    assert result.reason.startswith("tenant storage quota: GiB of claim storage 80+40 would exceed 100")


def test_the_namespace_quota_carries_the_tenants_claim_storage_and_count() -> None:
    limits = tenant_limits(make_tenant(storage_gib=300, max_claims=12))
    assert (limits.storage_gib, limits.max_claims) == (300, 12)


def test_the_api_shows_claim_usage_and_admins_set_the_claim_quota(client: Any) -> None:
    tenant = make_tenant()
    user = member(tenant)
    make_job(tenant, user, status=JobStatus.HALTED, attempt=1, learners=3)
    client.force_login(user)
    listed = client.get(f"/api/v1/tenants/{tenant.slug}/").json()
    assert (listed["usage"]["storage_gib"], listed["usage"]["claims"]) == (30, 3)
    assert (listed["quota"]["storage_gib"], listed["quota"]["max_claims"]) == (500, 50)
    url = f"/api/v1/tenants/{tenant.slug}/quota/"
    assert client.patch(url, {"storage_gib": 10}, content_type="application/json").status_code == 403
    client.force_login(make_user(is_superuser=True, is_staff=True))
    bad = client.patch(url, {"max_claims": -1}, content_type="application/json")
    assert bad.status_code == 400 and "max_claims" in bad.json()["errors"], bad.json()
    done = client.patch(url, {"storage_gib": 100, "max_claims": 8}, content_type="application/json")
    assert done.status_code == 200 and (done.json()["storage_gib"], done.json()["max_claims"]) == (100, 8)


def test_the_tenant_page_and_the_admin_console_show_claim_storage(client: Any) -> None:
    tenant = make_tenant()
    user = member(tenant)
    make_job(tenant, user, status=JobStatus.HALTED, attempt=1, learners=2)
    client.force_login(user)
    page = client.get(f"/tenants/{tenant.slug}/").content.decode()
    assert "Claim storage" in page and "Claims" in page
    client.force_login(make_user(is_superuser=True, is_staff=True))
    admin = client.get("/admin/tenants/tenant/").content.decode()
    assert "20 GiB / 500 GiB in 2/50 claims" in admin
