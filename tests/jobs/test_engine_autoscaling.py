"""Autoscaling from zero, end to end on kubesim: a GPU pool with no node (NODE_POOLS, and kubesim's cluster
autoscaler growing the same group) takes a 1-GPU job and a 2-learner gang: admitted against what the pool
may add, its unpinned pods make the autoscaler add nodes, the jobs run and succeed, and the pool scales
back down once they end; a job bigger than the pool's maximum is still refused as "can never fit"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from clusterio.autoscalerstatus import parse_status
from clusterio.provisioning import ProvisioningRequests
from jobs.cluster import namespace_for
from jobs.cluster.pools import forget_node_group_sizes
from jobs.core.pools import is_potential, pool_of
from jobs.models import Job
from jobs.services import job_submit
from kubesim.autoscaler import GROUP_LABEL
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import python_spec, wait_status, wait_until

PRODUCT = "NVIDIA-A100-SXM4-80GB"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POOL = "a100-pool"


@pytest.fixture
def pool(engine: KubeSim, settings: Any) -> Iterator[KubeSim]:
    """A pool of tainted 2-GPU nodes, 0 to 2 of them, declared to the platform and grown by kubesim."""
    settings.NODE_POOLS = json.dumps(
        [
            {
                "name": POOL,
                "gpu_type": PRODUCT,
                "gpus": 2,
                "cpu_millis": 4000,
                "memory_mib": 8192,
                "taints": ["nvidia.com/gpu=present:NoSchedule"],
                "max_nodes": 2,
            }
        ]
    )
    engine.add_node_group(
        {"name": POOL, "gpus": 2, "gpu_product": PRODUCT, "cpu": 4, "memory": 8 * 2**30, "taints": [TAINT]}
        | {"max_nodes": 2}
    )
    try:
        yield engine
    finally:
        wait_until(lambda: not pool_nodes(engine), 60, "the pool to scale back to zero")
        engine.remove_node_group(POOL)


def pool_nodes(sim: KubeSim, pool: str = POOL) -> list[str]:
    with sim.api_client() as api:
        found = client.CoreV1Api(api).list_node(label_selector=f"{GROUP_LABEL}={pool}").items
    return [str(n.metadata.name) for n in found]


def provisioning_requests(sim: KubeSim, namespace: str) -> list[str]:
    with sim.api_client() as api:
        found = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests"
        )
    return [str(item["metadata"]["name"]) for item in found["items"]]


@pytest.mark.kubesim_only  # the cluster autoscaler is kubesim's
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("api", ["provisioning-request", "pending-pods"])
def test_jobs_on_a_pool_at_zero_scale_it_up_succeed_and_it_scales_back_down(
    pool: KubeSim, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the ProvisioningRequest API each gang waits for its request (the reason says so) and the request
    goes with the job's objects; without it (a classic autoscaler) the unpinned pods go pending."""
    if api == "pending-pods":
        monkeypatch.setattr(ProvisioningRequests, "serves_provisioning_requests", lambda self: False)
    # The autoscaler answers a request at its next loop (the Cluster Autoscaler's scan interval) and, the
    # class being best effort, says Provisioned as soon as it has asked for the nodes: a loop of 3 s makes
    # the wait long enough to see.
    monkeypatch.setattr(pool.cluster.autoscaler, "scan_interval", 3.0)
    tenant = make_tenant(gpus=16)
    user = member(tenant)
    assert pool_nodes(pool) == []
    gpu = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "A100"}
    one = job_submit(
        tenant=tenant, user=user, document=json.loads(python_spec("one", "print(1)", resources=gpu))
    )
    gang_resources = gpu | {"gpus": 2}
    gang = job_submit(
        tenant=tenant,
        user=user,
        document=json.loads(python_spec("gang", "print(2)", resources=gang_resources, learners=2)),
    )
    seen: set[str] = set()
    messages: set[str] = set()

    def look() -> None:
        seen.update(pool_nodes(pool))
        messages.update(Job.objects.filter(pk__in=[one.pk, gang.pk]).values_list("message", flat=True))

    one = wait_status(one, "succeeded", timeout=120, poll=look)
    gang = wait_status(gang, "succeeded", timeout=120, poll=look)
    assert is_potential(one.placements[0])  # admitted while the pool had no node
    assert 1 <= len(seen) <= 2
    waited = f"waiting for 1 node(s) of pool {POOL} to be provisioned"
    assert any(m.startswith(waited) for m in messages) == (api == "provisioning-request"), messages
    namespace = namespace_for(tenant)
    wait_until(lambda: not provisioning_requests(pool, namespace), 30, "the requests to be deleted")
    wait_until(lambda: not pool_nodes(pool), 60, "the pool to scale back to zero")


@pytest.mark.kubesim_only
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_job_bigger_than_the_pool_maximum_can_never_fit(pool: KubeSim) -> None:
    tenant = make_tenant(gpus=16)
    user = member(tenant)
    resources = {"cpu": "250m", "memory": "128Mi", "gpus": 2, "gpu_type": "A100"}
    job = job_submit(
        tenant=tenant,
        user=user,
        document=json.loads(python_spec("huge", "print(3)", resources=resources, learners=3)),
    )

    def refused() -> bool:
        job.refresh_from_db()
        return job.message.startswith("can never fit")

    wait_until(refused, 30, "the refusal")
    assert job.status == "queued" and pool_nodes(pool) == []


CPU_POOL = "cpu-big"


@pytest.fixture
def cpu_pool(engine: KubeSim, settings: Any) -> Iterator[KubeSim]:
    """A CPU pool of 128-core nodes, 0 to 1 of them, told by its pool label and sized by the autoscaler's
    status (the platform is given no max_nodes)."""
    engine.add_node_group({"name": CPU_POOL, "cpu": 128, "memory": 64 * 2**30, "max_nodes": 1})
    settings.NODE_POOL_LABEL = GROUP_LABEL
    settings.NODE_POOLS = json.dumps(
        [{"name": CPU_POOL, "node_group": CPU_POOL, "gpus": 0, "cpu_millis": 128_000, "memory_mib": 65_536}]
    )

    def reported() -> bool:
        with engine.api_client() as api:
            status = client.CoreV1Api(api).read_namespaced_config_map(
                "cluster-autoscaler-status", "kube-system"
            )
        return CPU_POOL in parse_status(status.data["status"])

    wait_until(reported, 30, "the autoscaler's status to report the group")
    forget_node_group_sizes()
    try:
        yield engine
    finally:
        forget_node_group_sizes()
        wait_until(lambda: not pool_nodes(engine, CPU_POOL), 60, "the CPU pool to scale back to zero")
        engine.remove_node_group(CPU_POOL)


@pytest.mark.kubesim_only  # the cluster autoscaler is kubesim's
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cpu_job_too_big_for_every_node_grows_the_cpu_pool_it_was_placed_on(cpu_pool: KubeSim) -> None:
    """No node has 100 cores; the CPU pool's may, up to the size the autoscaler reports. The job is admitted
    on the pool's future node, its pod asks for that pool by label, the pool grows and the job succeeds."""
    tenant = make_tenant(cpu_millis=200_000, memory_mib=65_536)
    resources = {"cpu": "100", "memory": "128Mi"}
    job = job_submit(
        tenant=tenant,
        user=member(tenant),
        document=json.loads(python_spec("wide", "print('wide')", resources=resources)),
    )
    seen: set[str] = set()
    job = wait_status(job, "succeeded", timeout=120, poll=lambda: seen.update(pool_nodes(cpu_pool, CPU_POOL)))
    assert [pool_of(n) for n in job.placements] == [CPU_POOL]
    assert len(seen) == 1
