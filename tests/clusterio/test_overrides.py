"""Operator overrides on learner pods: applied after the platform's pod, global before tenant, patches last;
the result validates against Kubernetes 1.37 and never loses what the platform relies on."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio import names
from clusterio.builders import JobPodsSpec, make_learner_pod
from clusterio.overrides import apply_pod_overrides, strategic_merge
from common.podoverrides import overrides_clean
from tests.clusterio.validation import validated

GLOBAL = {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "node_selector": {"example.com/pool": "shared", "topology.kubernetes.io/zone": "a"},
    "priority_class_name": "batch-low",
    "labels": {"example.com/team": "platform"},
    "annotations": {"example.com/owner": "global"},
    "patch": {"spec": {"runtimeClassName": "runc", "dnsPolicy": "Default"}},
}
TENANT = {
    "tolerations": [{"key": "spot", "operator": "Exists"}],
    "node_selector": {"example.com/pool": "vision"},
    "node_affinity": [{"key": "example.com/tier", "operator": "In", "values": ["gold"]}],
    "priority_class_name": "vision-high",
    "labels": {"example.com/team": "vision"},
    "patch": {"spec": {"runtimeClassName": "gvisor", "containers": [{"name": "learner", "stdin": True}]}},
}


def _spec(**fields: Any) -> JobPodsSpec:
    base: dict[str, Any] = {
        "job_id": 7, "attempt": 1, "tenant": "vision", "namespace": "trainyard-vision", "image": "python:3.12",
        "command": ["python", "train.py"], "learners": 1, "gpus": 0, "cpu_millis": 1000, "memory_mib": 512,
        "checkpoint_dir": "/ckpt", "data_dir": "/data", "result_dir": "/results", "node_names": ("node-a",),
    }  # fmt: skip
    return JobPodsSpec(**(base | fields))


def test_global_then_tenant_then_patches_last_on_a_valid_pod() -> None:
    docs = (overrides_clean(GLOBAL), overrides_clean(TENANT))
    plain = validated(make_learner_pod(_spec(), 0))
    pod = validated(make_learner_pod(_spec(pod_overrides=docs), 0))
    spec = pod["spec"]
    assert spec["tolerations"][-2:] == [GLOBAL["tolerations"][0], {"key": "spot", "operator": "Exists"}]
    assert spec["nodeSelector"] == {"example.com/pool": "vision", "topology.kubernetes.io/zone": "a"}
    assert spec["priorityClassName"] == "vision-high"
    assert spec["runtimeClassName"] == "gvisor" and spec["dnsPolicy"] == "Default"
    assert spec["containers"][0]["stdin"] is True
    assert spec["containers"][0]["securityContext"] == plain["spec"]["containers"][0]["securityContext"]
    # The tenant's requirement narrows the platform's binding to node-a, in the same term.
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"][0]["values"] == ["node-a"]
    assert term["matchExpressions"] == TENANT["node_affinity"]
    labels = pod["metadata"]["labels"]
    assert labels["example.com/team"] == "vision" and labels[names.LABEL_TENANT] == "vision"
    assert pod["metadata"]["annotations"] == {"example.com/owner": "global"}
    assert plain["spec"].get("priorityClassName") is None  # nothing without overrides


def test_a_pod_without_required_affinity_gets_one_term_of_the_operators_requirements() -> None:
    docs = (overrides_clean({"node_affinity": [{"key": "zone", "operator": "Exists"}]}),)
    pod = validated(make_learner_pod(_spec(node_names=None, pod_overrides=docs), 0))
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"metadata": {"labels": {names.LABEL_TENANT: "other"}}}, "label trainyard.io/tenant"),
        ({"metadata": {"namespace": "kube-system"}}, "the pod's namespace"),
        ({"spec": {"hostNetwork": True}}, "spec.hostNetwork"),
        ({"spec": {"containers": [{"name": "learner"}, {"name": "x"}], "hostIPC": True}}, "spec.hostIPC"),
        (
            {"spec": {"containers": [{"name": "learner", "securityContext": {"privileged": True}}]}},
            "securityContext",
        ),
        ({"spec": {"volumes": [{"name": "node", "hostPath": {"path": "/"}}]}}, "hostPath volume"),
        ({"spec": {"volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]}}, "volume scratch"),
        ({"spec": {"affinity": None}}, "nodeAffinity"),
    ],
)
def test_even_an_unchecked_patch_cannot_undo_what_the_platform_owns(
    patch: dict[str, Any], message: str
) -> None:
    # Settings and policies are checked before use (common.podoverrides); this is the builder's own backstop.
    pod = validated(make_learner_pod(_spec(), 0))
    with pytest.raises(ValueError, match=message):
        apply_pod_overrides(pod, [{"patch": patch}])


def test_strategic_merge_merges_named_lists_and_deletes_with_null() -> None:
    target = {
        "containers": [{"name": "a", "x": 1, "y": 2}],
        "volumes": [{"name": "v"}],
        "args": [1, 2],
        "gone": 1,
    }
    patch = {
        "containers": [{"name": "a", "y": None, "z": 3}, {"name": "b"}],
        "volumes": [{"name": "w", "emptyDir": {}}],
        "args": [3],
        "gone": None,
    }
    assert strategic_merge(target, patch) == {
        "containers": [{"name": "a", "x": 1, "z": 3}],  # a container the pod has not is left out
        "volumes": [{"name": "v"}, {"name": "w", "emptyDir": {}}],
        "args": [3],
    }
    assert target["containers"][0] == {"name": "a", "x": 1, "y": 2}


def test_a_patch_changes_the_platforms_containers_where_the_pod_has_them_and_adds_none() -> None:
    patch = {
        "spec": {
            "initContainers": [{"name": "fetch", "imagePullPolicy": "Always"}],
            "containers": [{"name": "x"}],
        }
    }
    pod = validated(make_learner_pod(_spec(pod_overrides=({"patch": patch},)), 0))
    assert "initContainers" not in pod["spec"] and [c["name"] for c in pod["spec"]["containers"]] == [
        "learner"
    ]
