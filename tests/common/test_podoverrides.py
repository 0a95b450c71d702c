"""Operator overrides are checked before they are used: a misspelt or refused field is named with its path,
in settings (POD_OVERRIDES stops the process) as at an edit of a tenant's policy."""

from __future__ import annotations

from typing import Any

import pytest

from common.podoverrides import (
    OverridesError,
    node_matches,
    overrides_clean,
    overrides_select_nodes,
    overrides_tolerations,
)

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def problems(value: Any) -> list[str]:
    with pytest.raises(OverridesError) as caught:
        overrides_clean(value)
    return caught.value.problems


def test_a_full_document_is_kept_and_empty_fields_dropped() -> None:
    document = {
        "tolerations": [
            GPU_TOLERATION,
            {"key": "pool", "value": "spot", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
        "node_selector": {"topology.kubernetes.io/zone": "eu-west-1a"},
        "node_affinity": [{"key": "example.com/tier", "operator": "In", "values": ["gold", "silver"]}],
        "priority_class_name": "training-high",
        "labels": {"example.com/cost-center": "ml"},
        "annotations": {"example.com/owner": "platform team"},
        "patch": {
            "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "learner", "stdin": False}]}
        },
    }
    clean = overrides_clean({**document, "labels": {}})
    assert clean["tolerations"][1] == {
        "operator": "Equal", "key": "pool", "value": "spot", "effect": "NoExecute", "tolerationSeconds": 60
    }  # fmt: skip
    assert "labels" not in clean and clean["patch"] == document["patch"]
    assert overrides_clean(None) == overrides_clean("") == {}
    assert overrides_tolerations(clean, {"tolerations": [GPU_TOLERATION]})[-1] == GPU_TOLERATION


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"tolerations": [{"key": "a", "operator": "In"}]},
            "tolerations[0].operator: must be Exists or Equal, got 'In'",
        ),
        ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "tolerations[0].effect: must be one of"),
        (
            {"tolerations": [{"operator": "Equal", "value": "x"}]},
            "a toleration without a key must use the Exists",
        ),
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
            "an Exists toleration has no value",
        ),
        ({"tolerations": [{"key": "a", "tolerationSeconds": 5}]}, "applies to NoExecute tolerations only"),
        ({"tolerations": [{"key": "a", "operater": "Exists"}]}, "tolerations[0].operater: unknown field"),
        ({"toleration": []}, "toleration: unknown field (known: tolerations,"),
        ({"node_selector": {"bad key!": "x"}}, "node_selector.bad key!: not a key"),
        (
            {"node_affinity": [{"key": "zone", "operator": "Exists", "values": ["a"]}]},
            "Exists takes no values",
        ),
        (
            {"node_affinity": [{"key": "zone", "operator": "Near"}]},
            "node_affinity[0].operator: must be one of",
        ),
        ({"priority_class_name": "system-node-critical"}, "reserved for the cluster's own pods"),
        (
            {"labels": {"trainyard.io/tenant": "other"}},
            "labels.trainyard.io/tenant: the platform owns this key",
        ),
        ({"annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "x"}}, "the platform owns"),
        ({"patch": {"spec": {"hostNetwork": True}}}, "patch.spec.hostNetwork: cannot be overridden"),
        (
            {"patch": {"spec": {"serviceAccountName": "admin"}}},
            "patch.spec.serviceAccountName: cannot be overridden",
        ),
        (
            {"patch": {"spec": {"automountServiceAccountToken": True}}},
            "automountServiceAccountToken: cannot be",
        ),
        (
            {"patch": {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}},
            "volumes[0].hostPath",
        ),
        (
            {
                "patch": {
                    "spec": {"containers": [{"name": "learner", "securityContext": {"privileged": True}}]}
                }
            },
            "patch.spec.containers[0].securityContext: cannot be overridden",
        ),
        (
            {"patch": {"spec": {"containers": [{"name": "miner", "image": "x"}]}}},
            "containers[0].name: must name",
        ),
        ({"patch": {"spec": {"initContainers": [{"name": "learner"}]}}}, "initContainers (fetch)"),
        (
            {"patch": {"spec": {"tolerations": []}}},
            "patch.spec.tolerations: cannot be overridden (use `tolerations`",
        ),
        ({"patch": {"spec": {"affinity": {"nodeAffinity": {}}}}}, "use `node_affinity`"),
        ({"patch": {"spec": {"affinity": None}}}, "patch.spec.affinity: cannot be removed"),
        (
            {"patch": {"metadata": {"namespace": "kube-system"}}},
            "patch.metadata: use `labels` and `annotations`",
        ),
        (
            {"patch": {"spec": {"runtimeClass": "gvisor"}}},
            "patch.spec.runtimeClass: unknown field of PodSpec",
        ),
        (
            {"patch": {"spec": {"dnsConfig": {"nameserver": ["1.1.1.1"]}}}},
            "dnsConfig.nameserver: unknown field",
        ),
        ({"patch": {"spec": {"schedulerName": 7}}}, "patch.spec.schedulerName: must be a string"),
        ([], "must be a JSON object"),
    ],
)
def test_what_is_refused_is_named_with_its_path(document: Any, expected: str) -> None:
    found = problems(document)
    assert any(expected in problem for problem in found), found


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"tolerations": [{"key": "a", "operator": "In"}], "patch": {"spec": {"hostPID": True}}})
    assert len(found) == 2


@pytest.mark.parametrize(
    ("document", "labels", "expected"),
    [
        ({"node_selector": {"pool": "a"}}, {"pool": "a", "zone": "x"}, True),
        ({"node_selector": {"pool": "a"}}, {"pool": "b"}, False),
        ({"node_affinity": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}, {"pool": "b"}, True),
        ({"node_affinity": [{"key": "pool", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"node_affinity": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"node_affinity": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {"pool": "a"}, False),
        ({"node_affinity": [{"key": "spot", "operator": "Exists"}]}, {"spot": ""}, True),
        ({"node_affinity": [{"key": "spot", "operator": "DoesNotExist"}]}, {"spot": ""}, False),
        ({"node_affinity": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}, {"gen": "4"}, True),
        ({"node_affinity": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}, {"gen": "4"}, False),
        ({"node_affinity": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}, {"gen": "new"}, False),
        (
            {"node_selector": {"pool": "a"}, "node_affinity": [{"key": "z", "operator": "Exists"}]},
            {"pool": "a"},
            False,
        ),
    ],
)
def test_nodes_are_matched_as_the_kube_scheduler_matches_them(
    document: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert overrides_select_nodes(overrides_clean(document))
    assert node_matches(overrides_clean(document), labels) is expected
