"""The scheduler's filters and words (taints, cordons, selectors, affinity, resources, preemption verdict),
GKE-style GPU taints, and the kubelet's admission of pods bound with ``spec.nodeName``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubesim.cli import build_parser
from kubesim.nodeadmit import rejection
from kubesim.scheduler import fit_message
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

GPU_NODE = "kubesim-gpu-0"
SMALL = "small-cpu"
GPU_TOLERATION = client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


@pytest.fixture(scope="module")
def tainted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    """Three nodes: the local one (no GPUs here), a 1-cpu node, and a GKE-style tainted 4-GPU node."""
    with running_kubesim(
        tmp_path_factory.mktemp("tainted"),
        gpu_nodes=1,
        gpus_per_node=4,
        gpu_taints=True,
        local_gpu_count=0,
        restart_backoff=0.2,
    ) as sim:
        sim.cluster.add_node(SMALL, cpu=1, memory=2**30, labels={"pool": "small"})
        yield sim


@pytest.fixture(scope="module")
def kube(tainted: KubeSim) -> client.CoreV1Api:
    return client.CoreV1Api(tainted.api_client())


def _pod(name: str, cpu: str = "100m", gpus: int = 0, **spec: Any) -> client.V1Pod:
    limits = {"cpu": cpu, "memory": "64Mi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    pod = make_pod(name, ["true"], resources=client.V1ResourceRequirements(requests=limits, limits=limits))
    for key, value in spec.items():
        setattr(pod.spec, key, value)
    return pod


def _unschedulable(core: client.CoreV1Api, name: str, ns: str = "default") -> str:
    """Wait until the pod is marked Unschedulable; its PodScheduled message (also the Event's)."""

    def check() -> str | None:
        conditions = core.read_namespaced_pod(name, ns).status.conditions or []
        cond = next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)
        return cond.message if cond is not None and cond.reason == "Unschedulable" else None

    message = wait_for(check)
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    assert message in {e.message for e in events if e.reason == "FailedScheduling" and e.type == "Warning"}
    return str(message)


def _hostname_in(*names: str) -> client.V1Affinity:
    term = client.V1NodeSelectorTerm(
        match_expressions=[
            client.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=list(names))
        ]
    )
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=[term]
            )
        )
    )


def _rejected(core: client.CoreV1Api, name: str) -> client.V1Pod:
    pod = wait_phase(core, "default", name, ("Failed", "Running", "Succeeded"))
    assert pod.status.phase == "Failed", pod.status
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    assert any(e.reason == pod.status.reason and e.source.component == "kubelet" for e in events)
    return pod


def test_gpu_nodes_carry_the_gke_taint_only_when_asked(
    tainted: KubeSim, kube: client.CoreV1Api, sim: KubeSim
) -> None:
    taints = kube.read_node(GPU_NODE).spec.taints
    assert [(t.key, t.value, t.effect) for t in taints] == [("nvidia.com/gpu", "present", "NoSchedule")]
    assert not kube.read_node("kubesim-node").spec.taints and not kube.read_node(SMALL).spec.taints
    plain = client.CoreV1Api(sim.api_client()).read_node(GPU_NODE)
    assert not plain.spec.taints
    args = ["serve", "--state-dir", "s", "--kubeconfig", "k"]
    assert build_parser().parse_args([*args, "--gpu-taints"]).gpu_taints
    assert not build_parser().parse_args(args).gpu_taints


def test_unschedulable_message_counts_each_nodes_reason_and_the_preemption_verdict(
    kube: client.CoreV1Api,
) -> None:
    kube.create_namespaced_pod("default", _pod("mixed", cpu="2", affinity=_hostname_in(SMALL, GPU_NODE)))
    assert _unschedulable(kube, "mixed") == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}. "
        f"preemption: 0/3 nodes are available: 1 {NO_VICTIMS}, 2 {NOT_HELPFUL}."
    )
    # As on a real cluster, preemptionPolicy comes from a PriorityClass (a pod may not set its own).
    never = client.V1PriorityClass(
        metadata=client.V1ObjectMeta(name="never-preempts"), value=10, preemption_policy="Never"
    )
    client.SchedulingV1Api(kube.api_client).create_priority_class(never)
    kube.create_namespaced_pod("default", _pod("never", cpu="64", priority_class_name="never-preempts"))
    assert _unschedulable(kube, "never") == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )


def test_cpu_pods_stay_off_tainted_gpu_nodes_and_tolerating_gpu_pods_land_there(
    kube: client.CoreV1Api,
) -> None:
    kube.create_namespaced_pod(
        "default", _pod("cpu-only", node_selector={"kubernetes.io/hostname": GPU_NODE})
    )
    assert _unschedulable(kube, "cpu-only") == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "2 node(s) didn't match Pod's node affinity/selector. "
        f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."
    )
    kube.create_namespaced_pod("default", _pod("untolerated-gpu", gpus=1))
    assert "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 Insufficient nvidia.com/gpu." in (
        _unschedulable(kube, "untolerated-gpu")
    )
    kube.create_namespaced_pod("default", _pod("gpu", gpus=1, tolerations=[GPU_TOLERATION]))
    assert wait_phase(kube, "default", "gpu", ("Succeeded",)).spec.node_name == GPU_NODE


def test_cordoned_node_and_node_affinity_by_field_and_label(kube: client.CoreV1Api) -> None:
    kube.patch_node(SMALL, {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json")
    try:
        kube.create_namespaced_pod("default", _pod("cordoned", node_selector={"pool": "small"}))
        assert _unschedulable(kube, "cordoned") == (
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were unschedulable. "
            f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."
        )
    finally:
        kube.patch_node(
            SMALL, {"spec": {"unschedulable": False}}, _content_type="application/merge-patch+json"
        )
    assert wait_phase(kube, "default", "cordoned", ("Succeeded",)).spec.node_name == SMALL
    by_field = client.V1NodeSelectorTerm(
        match_fields=[client.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[SMALL])]
    )
    affinity = client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=[by_field]
            )
        )
    )
    kube.create_namespaced_pod("default", _pod("by-field", affinity=affinity))
    assert wait_phase(kube, "default", "by-field", ("Succeeded",)).spec.node_name == SMALL


def test_pod_with_node_name_bypasses_the_scheduler_and_the_kubelet_admits_or_rejects_it(
    kube: client.CoreV1Api,
) -> None:
    kube.create_namespaced_pod(
        "default", _pod("direct", node_name=GPU_NODE)
    )  # NoSchedule: kubelet ignores it
    assert wait_phase(kube, "default", "direct", ("Succeeded",)).spec.node_name == GPU_NODE
    kube.create_namespaced_pod("default", _pod("too-big", cpu="64", node_name=GPU_NODE))
    pod = _rejected(kube, "too-big")
    assert (pod.status.reason, pod.status.message) == (
        "OutOfcpu",
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: 32000",
    )
    kube.create_namespaced_pod("default", _pod("gpu-hog", gpus=8, node_name=GPU_NODE))
    pod = _rejected(kube, "gpu-hog")
    assert pod.status.reason == "OutOfnvidia.com/gpu"
    assert pod.status.message.endswith("nvidia.com/gpu, requested: 8, used: 0, capacity: 4")
    kube.create_namespaced_pod("default", _pod("elsewhere", node_name=SMALL, node_selector={"pool": "big"}))
    pod = _rejected(kube, "elsewhere")
    assert (pod.status.reason, pod.status.message) == (
        "NodeAffinity",
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
    )


def test_kubelet_rejects_a_pod_that_does_not_tolerate_a_no_execute_taint() -> None:
    # Through the API the taint manager evicts such a pod in the same pass, so the kubelet's own check is
    # tested on its own here.
    node = {
        "metadata": {"name": "n", "labels": {}},
        "spec": {"taints": [{"key": "drain", "value": "now", "effect": "NoExecute"}]},
        "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}},
    }
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert rejection(pod, node, []) == (
        "TaintToleration",
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
    )
    pod["spec"]["tolerations"] = [{"key": "drain", "operator": "Exists"}]
    assert rejection(pod, node, []) is None
    node["status"]["allocatable"]["pods"] = "1"
    assert rejection(pod, node, [pod]) == (
        "OutOfpods",
        "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1",
    )


def test_kubelet_counts_the_pods_it_already_runs(kube: client.CoreV1Api, tmp_path: Path) -> None:
    sleeper = _pod("resident", cpu="700m", node_name=SMALL)
    sleeper.spec.containers[0].command = ["sleep", "30"]
    kube.create_namespaced_pod("default", sleeper)
    wait_phase(kube, "default", "resident", ("Running",))
    try:
        kube.create_namespaced_pod("default", _pod("late", cpu="500m", node_name=SMALL))
        assert _rejected(kube, "late").status.message == (
            "Pod was rejected: Node didn't have enough resource: "
            "cpu, requested: 500, used: 700, capacity: 1000"
        )
    finally:
        kube.delete_namespaced_pod("resident", "default", grace_period_seconds=0)


def test_fit_message_for_a_volume_problem_and_for_a_cluster_without_nodes() -> None:
    pod: dict[str, Any] = {"spec": {}}
    assert fit_message(2, Counter(), 0, 'persistentvolumeclaim "ckpt" not found', pod) == (
        '0/2 nodes are available: persistentvolumeclaim "ckpt" not found. '
        f"preemption: 0/2 nodes are available: 2 {NOT_HELPFUL}."
    )
    assert fit_message(0, Counter(), 0, None, pod) == "no nodes available to schedule pods"
