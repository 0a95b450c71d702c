"""Taints and tolerations: Kubernetes' matching rules, the settings spelling, and what learners tolerate."""

from __future__ import annotations

import pytest

from clusterio.taints import (
    DEFAULT_GPU_TOLERATIONS,
    Taint,
    Toleration,
    learner_tolerations,
    parse_toleration,
    taints_of,
    tolerates,
    untolerated,
)

GKE = Taint("nvidia.com/gpu", "present", "NoSchedule")
NVIDIA = Taint("nvidia.com/gpu", "true", "NoSchedule")
BARE = Taint("nvidia.com/gpu", "", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule"), GKE, True),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule"), BARE, True),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"), GKE, False),
        (Toleration("nvidia.com/gpu", "Exists"), Taint("nvidia.com/gpu", "x", "NoExecute"), True),
        (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GKE, True),
        (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), NVIDIA, False),
        (Toleration("nvidia.com/gpu", "Equal", "", "NoSchedule"), BARE, True),
        (Toleration("nvidia.com/gpu", "Equal", "", "NoSchedule"), GKE, False),
        (Toleration("other", "Exists"), GKE, False),
        (Toleration(operator="Exists"), GKE, True),
        (Toleration(operator="Exists", effect="NoExecute"), GKE, False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert toleration.tolerates(taint) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nvidia.com/gpu:NoSchedule", Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")),
        ("nvidia.com/gpu=present:NoSchedule", Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule")),
        ("sku=gpu", Toleration("sku", "Equal", "gpu")),
        ("dedicated", Toleration("dedicated", "Exists")),
        (" * ", Toleration(operator="Exists")),
    ],
)
def test_settings_spell_tolerations_as_kubectl_spells_taints(text: str, expected: Toleration) -> None:
    assert parse_toleration(text) == expected


@pytest.mark.parametrize("text", ["", "=x:NoSchedule", "key:", "key:Sometimes", "key=v:NoExecute:x"])
def test_misspelt_tolerations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_toleration(text)


def test_the_default_gpu_toleration_covers_gke_nvidia_and_bare_gpu_taints() -> None:
    assert all(tolerates(DEFAULT_GPU_TOLERATIONS, t) for t in (GKE, NVIDIA, BARE))
    assert not tolerates(DEFAULT_GPU_TOLERATIONS, Taint("dedicated", "ml", "NoSchedule"))


def test_cpu_learners_tolerate_no_gpu_taint_and_all_learners_ride_out_a_lost_node_for_a_while() -> None:
    cpu = learner_tolerations(gpus=0, gpu_tolerations=DEFAULT_GPU_TOLERATIONS, node_lost_seconds=30)
    gpu = learner_tolerations(gpus=1, gpu_tolerations=DEFAULT_GPU_TOLERATIONS, node_lost_seconds=30)
    unreachable = Taint("node.kubernetes.io/unreachable", "", "NoExecute")
    assert untolerated(cpu, [GKE, unreachable]) == (GKE,)
    assert untolerated(gpu, [GKE, unreachable]) == ()
    assert [t.toleration_seconds for t in cpu] == [30, 30]
    assert learner_tolerations(gpus=0, gpu_tolerations=DEFAULT_GPU_TOLERATIONS, node_lost_seconds=None) == ()


def test_only_taints_that_keep_pods_off_count() -> None:
    node = {
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": "gone", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
            ]
        }
    }
    assert taints_of(node) == (Taint("gone", "", "NoExecute"), GKE)
    assert [str(t) for t in taints_of(node)] == ["gone:NoExecute", "nvidia.com/gpu=present:NoSchedule"]
    assert taints_of({"spec": {}}) == ()
