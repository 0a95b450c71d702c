"""Admission reads the operator's pod overrides as the pods will carry them: a tenant's tolerations open
tainted nodes to its jobs only, and node selectors (POD_OVERRIDES merged with a tenant's own, the tenant's
winning) keep each tenant's jobs to the nodes its pods may go to, so no job is placed where its pods would
wait unschedulable."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio.capacity import NodeInfo, Resources
from clusterio.taints import Taint
from jobs.core import admission
from jobs.scheduling import build_snapshot
from tenants.policy import policy_set
from tests.factories import make_job, make_tenant

pytestmark = pytest.mark.django_db

ROOM = Resources(0, 16_000, 65_536)
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


def node(name: str, pool: str, *taints: Taint) -> NodeInfo:
    return NodeInfo(name, True, None, ROOM, ROOM, taints=taints, labels=(("example.com/pool", pool),))


def placed(tenants: dict[str, Any]) -> dict[str, list[str]]:
    """Where one cycle places one 12-core job of each tenant (one per node fits), by tenant slug."""
    jobs = {make_job(tenant=t, cpu_millis=12_000).pk: slug for slug, t in tenants.items()}
    nodes = [node("n-shared", "shared"), node("n-vision", "vision"), node("n-gpu", "shared", GPU_TAINT)]
    decision = admission.admit(build_snapshot(nodes=nodes, now=0.0))
    return {jobs[a.job_id]: a.placements for a in decision.admitted}


def test_global_and_tenant_selectors_and_a_tenant_toleration_steer_admission(settings: Any) -> None:
    settings.POD_OVERRIDES = {"node_selector": {"example.com/pool": "shared"}}
    vision, audio, text = make_tenant(), make_tenant(), make_tenant()
    policy_set(tenant=vision, pod_overrides={"node_selector": {"example.com/pool": "vision"}})
    gpu = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    policy_set(tenant=audio, pod_overrides=gpu)
    found = placed({"vision": vision, "audio": audio, "text": text})
    # vision's own selector replaces the global value; audio tolerates the GPU node, text does not.
    assert found["vision"] == ["n-vision"]
    assert found["text"] == ["n-shared"] and found["audio"] == ["n-gpu"]


def test_a_job_whose_pods_no_node_matches_waits_and_says_why(settings: Any) -> None:
    settings.POD_OVERRIDES = {
        "node_affinity": [{"key": "example.com/pool", "operator": "In", "values": ["none"]}]
    }
    tenant = make_tenant()
    job = make_job(tenant=tenant, cpu_millis=1_000)
    decision = admission.admit(build_snapshot(nodes=[node("n-shared", "shared")], now=0.0))
    assert not decision.admitted
    [pending] = [p for p in decision.pending if p.job_id == job.pk]
    assert "trainyard.io/pod-overrides:NoSchedule" in pending.reason


def test_a_row_written_past_the_checks_fails_its_tenants_launches_and_no_one_elses_cycle(caplog: Any) -> None:
    from jobs.cluster import pod_overrides
    from tenants.models import Policy

    broken, fine = make_tenant(), make_tenant()
    Policy.objects.create(tenant=broken, pod_overrides={"tolerations": [{"key": "x", "operator": "In"}]})
    job = make_job(tenant=fine, cpu_millis=1_000)
    decision = admission.admit(build_snapshot(nodes=[node("n-shared", "shared")], now=0.0))
    assert [a.job_id for a in decision.admitted] == [job.pk]
    assert "pod overrides ignored by admission: tolerations[0].operator" in caplog.text
    with pytest.raises(ValueError, match="must be Exists or Equal"):
        pod_overrides(broken)  # what pods_spec reads: the launch fails as InvalidSpec
