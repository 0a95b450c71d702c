"""Node pools that can grow (NODE_POOLS): admission counts the nodes each may still add, a job that fits a
pool's maximum is admitted on them and launched with unpinned pods, and one bigger than the maximum still
can never fit."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from clusterio.capacity import NodeInfo, Resources
from clusterio.taints import Taint
from jobs.cluster import node_pools, potential_pool_nodes
from jobs.cluster.podspec import _node_names, _node_pool
from jobs.core.pools import is_potential, parse_pools, pool_of, sized
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.scheduling import run_cycle
from jobs.services.submit import gpu_type_problem
from tests.factories import make_job, make_tenant

A100 = "NVIDIA-A100-SXM4-80GB"
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
POOL = {
    "name": "a100",
    "gpu_type": A100,
    "gpus": 8,
    "cpu_millis": 64_000,
    "memory_mib": 262_144,
    "taints": ["nvidia.com/gpu=present:NoSchedule"],
    "min_nodes": 0,
    "max_nodes": 2,
}
CPU_NODE = NodeInfo("cpu-0", True, None, Resources(0, 16_000, 65_536), Resources(0, 16_000, 65_536))


@pytest.fixture
def pools(settings: Any) -> None:
    settings.NODE_POOLS = json.dumps([POOL])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not JSON"),
        ('{"name": "a"}', "JSON list"),
        (json.dumps([{**POOL, "max_nodes": -1}]), "NODE_POOLS[0].max_nodes"),
        (json.dumps([{k: v for k, v in POOL.items() if k != "gpu_type"}]), "missing fields ['gpu_type']"),
        (json.dumps([{**POOL, "min_nodes": 3}]), "min_nodes is above max_nodes"),
        (json.dumps([POOL, {**POOL, "name": "other"}]), "its own gpu_type"),
        (json.dumps([{**POOL, "colour": "red"}]), "unknown fields ['colour']"),
    ],
)
def test_misspelt_node_pools_are_refused_with_the_entry_named(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_pools(text)


def test_a_misspelt_pool_taint_is_refused(settings: Any) -> None:
    settings.NODE_POOLS = json.dumps([{**POOL, "taints": ["nvidia.com/gpu=present:Sometimes"]}])
    with pytest.raises(ValueError, match="Effect one of"):
        node_pools()


def test_a_pool_at_zero_offers_its_maximum_and_a_grown_pool_what_is_left(pools: None) -> None:
    at_zero = potential_pool_nodes([CPU_NODE])
    assert [n.name for n in at_zero] == ["pool:a100/0", "pool:a100/1"]
    node = at_zero[0]
    assert (node.gpu_type, node.free, node.allocatable) == (A100, Resources(8, 64_000, 262_144), node.free)
    assert node.taints == (GPU_TAINT,) and node.ready and not node.unschedulable
    assert all(is_potential(n.name) and pool_of(n.name) == "a100" for n in at_zero)
    grown = NodeInfo("gke-a100-1", True, A100, node.allocatable, node.allocatable, taints=(GPU_TAINT,))
    assert [n.name for n in potential_pool_nodes([CPU_NODE, grown])] == ["pool:a100/0"]
    assert potential_pool_nodes([CPU_NODE, grown, grown]) == []


@pytest.mark.django_db
def test_a_gpu_job_is_admitted_on_a_pool_at_zero_and_its_pods_are_left_to_the_scheduler(pools: None) -> None:
    tenant = make_tenant(gpus=32)
    spec = {"name": "train", "image": "busybox", "command": ["x"], "resources": {"gpu_type": "A100"}}
    one = make_job(tenant, spec=spec, learners=1, gpus=1, cpu_millis=1000, memory_mib=1024)
    gang = make_job(tenant, spec=spec, learners=2, gpus=4, cpu_millis=1000, memory_mib=1024)
    result = run_cycle(nodes=[CPU_NODE])
    assert set(result.admitted) == {one.pk, gang.pk}
    one.refresh_from_db()
    gang.refresh_from_db()
    assert one.status == JobStatus.STARTING and all(is_potential(n) for n in one.placements + gang.placements)
    assert _node_names(one) is None and _node_names(gang) is None


@pytest.mark.django_db
def test_a_job_bigger_than_the_pool_maximum_can_never_fit(pools: None) -> None:
    tenant = make_tenant(gpus=32)
    spec = {"name": "train", "image": "busybox", "command": ["x"], "resources": {"gpu_type": "A100"}}
    job = make_job(tenant, spec=spec, learners=3, gpus=8, cpu_millis=1000, memory_mib=1024)
    assert run_cycle(nodes=[CPU_NODE]).admitted == []
    job = Job.objects.get(pk=job.pk)
    assert job.message.startswith("can never fit")


def test_a_gpu_type_only_a_pool_at_zero_has_is_accepted_at_submit(settings: Any) -> None:
    assert "no node of the cluster has GPU type A100" in (
        gpu_type_problem(gpu_type="A100", nodes=([CPU_NODE], "")) or ""
    )
    settings.NODE_POOLS = json.dumps([POOL])
    assert gpu_type_problem(gpu_type="A100", nodes=([CPU_NODE], "")) is None


CPU_POOL = {"name": "cpu-big", "gpus": 0, "cpu_millis": 32_000, "memory_mib": 131_072, "max_nodes": 3}


def test_with_a_pool_label_a_cpu_pool_and_two_pools_of_one_gpu_type_can_be_declared() -> None:
    pools = parse_pools(json.dumps([CPU_POOL, POOL, {**POOL, "name": "a100-spot"}]), by_label=True)
    assert [(p.name, p.gpu_type, p.gpus) for p in pools] == [
        ("cpu-big", "", 0),
        ("a100", A100, 8),
        ("a100-spot", A100, 8),
    ]
    with pytest.raises(ValueError, match=r"missing fields \['gpu_type'\]"):
        parse_pools(json.dumps([CPU_POOL]))
    with pytest.raises(ValueError, match="or set NODE_POOL_LABEL"):
        parse_pools(json.dumps([POOL, {**POOL, "name": "a100-spot"}]))
    with pytest.raises(ValueError, match="needs gpus > 0"):
        parse_pools(json.dumps([{**CPU_POOL, "gpu_type": A100}]), by_label=True)


def test_a_pool_naming_a_node_group_needs_no_max_and_takes_the_autoscalers_sizes() -> None:
    with pytest.raises(ValueError, match=r"missing fields \['max_nodes'\]"):
        parse_pools(json.dumps([{k: v for k, v in CPU_POOL.items() if k != "max_nodes"}]), by_label=True)
    entry = {k: v for k, v in CPU_POOL.items() if k != "max_nodes"} | {"node_group": "mig-cpu-big"}
    (pool,) = parse_pools(json.dumps([entry]), by_label=True)
    assert pool.max_nodes == 0, "until the autoscaler's status says"
    (resized,) = sized([pool], {"mig-cpu-big": (1, 5)})
    assert (resized.min_nodes, resized.max_nodes) == (1, 5)
    assert sized([pool], {"other": (1, 5)}) == [pool], "a group the status does not report keeps its sizes"


def test_with_a_pool_label_a_pools_nodes_are_those_carrying_its_name(settings: Any) -> None:
    settings.NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
    settings.NODE_POOLS = json.dumps([CPU_POOL, POOL, {**POOL, "name": "a100-spot", "max_nodes": 1}])
    shape = Resources(8, 64_000, 262_144)
    spot = NodeInfo("gke-spot-1", True, A100, shape, shape, taints=(GPU_TAINT,), pool="a100-spot")
    cpu = NodeInfo("gke-cpu-1", True, None, Resources(0, 32_000, 131_072), Resources(0, 32_000, 131_072))
    cpu_member = dataclasses.replace(cpu, pool="cpu-big")
    names = [n.name for n in potential_pool_nodes([CPU_NODE, spot, cpu_member])]
    # The spot node is a100-spot's only (its one node is there), not a100's: a100 may still add both.
    assert names == ["pool:cpu-big/0", "pool:cpu-big/1", "pool:a100/0", "pool:a100/1"]
    assert [n.pool for n in potential_pool_nodes([cpu])][:1] == ["cpu-big"]
    cpu_potential = potential_pool_nodes([cpu])[0]
    assert cpu_potential.gpu_type is None and cpu_potential.taints == ()


@pytest.mark.django_db
def test_a_cpu_job_on_a_cpu_pool_at_zero_waits_for_that_pools_nodes(settings: Any) -> None:
    settings.NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
    settings.NODE_POOLS = json.dumps([CPU_POOL])
    tenant = make_tenant(cpu_millis=100_000, memory_mib=500_000)
    spec = {"name": "train", "image": "busybox", "command": ["x"], "resources": {}}
    job = make_job(tenant, spec=spec, learners=2, gpus=0, cpu_millis=20_000, memory_mib=1024)
    assert run_cycle(nodes=[CPU_NODE]).admitted == [job.pk]
    job.refresh_from_db()
    assert [pool_of(n) for n in job.placements] == ["cpu-big", "cpu-big"]
    assert _node_pool(job) == ("cloud.google.com/gke-nodepool", "cpu-big")
    settings.NODE_POOL_LABEL = ""
    assert _node_pool(job) is None, "pools told by GPU type: the scheduler chooses"
