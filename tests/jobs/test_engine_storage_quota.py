"""Storage is quota, end to end on kubesim through the official client: a halted job keeps its checkpoint
claims and they count against the tenant's storage and claim quota (and its namespace ResourceQuota, which
refuses a claim past it), so another job waits for storage with the reason until the halted one is deleted."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from clusterio import names
from jobs import cluster
from jobs.models import Job
from jobs.services import job_cancel, job_delete, job_halt, job_submit
from kubesim.testing import KubeSim
from tenants.usage import tenant_usage
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until
from tests.jobs.test_engine_checkpoints import claims_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

UNTIL_TOLD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("working", flush=True)
while True:
    time.sleep(0.1)
"""


def namespace_quota(job: Job) -> tuple[dict[str, str], dict[str, str]]:
    quota = cluster.cluster().core.read_namespaced_resource_quota(
        names.RESOURCE_QUOTA_NAME, cluster.namespace_for(job.tenant)
    )
    assert quota.spec is not None
    return dict(quota.spec.hard or {}), dict((quota.status and quota.status.used) or {})


def test_a_halted_jobs_claims_hold_storage_quota_until_it_is_deleted(engine: KubeSim, settings: Any) -> None:
    settings.CHECKPOINT_CLAIM_SIZE, settings.CHECKPOINT_ACCESS_MODE = "10Gi", "ReadWriteOnce"
    tenant = make_tenant(storage_gib=30, max_claims=3)
    user = member(tenant)
    halted = job_submit(tenant=tenant, user=user, document=python_spec("held", UNTIL_TOLD, learners=2))
    wait_status(halted, "running", timeout=60)
    job_halt(job=halted, user=user)
    halted = wait_status(halted, "halted", timeout=60)
    assert len(claims_of(halted)) == 2, describe(halted)
    usage = tenant_usage(tenant)
    assert (usage.claims, usage.storage_gib, usage.cpu_millis) == (2, 20, 0)

    hard, _ = namespace_quota(halted)
    assert (hard["requests.storage"], hard["persistentvolumeclaims"]) == ("30Gi", "3")
    wait_until(
        lambda: namespace_quota(halted)[1].get("persistentvolumeclaims") == "2",
        what="the namespace quota to count the claims",
    )
    assert namespace_quota(halted)[1]["requests.storage"] == "20Gi"
    # The cluster's own fence: a claim past the namespace quota is refused by the apiserver.
    extra = k8s.V1PersistentVolumeClaim(
        metadata=k8s.V1ObjectMeta(name="by-hand"),
        spec=k8s.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=k8s.V1VolumeResourceRequirements(requests={"storage": "20Gi"}),
        ),
    )
    with pytest.raises(ApiException) as refused:
        cluster.cluster().core.create_namespaced_persistent_volume_claim(cluster.namespace_for(tenant), extra)
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)

    waiting = job_submit(tenant=tenant, user=user, document=python_spec("waits", "print('done')", learners=2))
    waiting = wait_until(
        lambda: Job.objects.filter(pk=waiting.pk, message__startswith="tenant storage quota").first(),
        what="the second job to wait for storage",
    )
    assert waiting.status == "queued" and "2+2 would exceed 3" in waiting.message, describe(waiting)

    job_cancel(job=halted, user=user)
    job_delete(job=Job.objects.get(pk=halted.pk), user=user)
    waiting = wait_status(waiting, "succeeded", timeout=90)
    assert (tenant_usage(tenant).claims, tenant_usage(tenant).storage_gib) == (2, 20), describe(waiting)
