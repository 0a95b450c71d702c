"""Builders: expected manifests, strict validation against Kubernetes 1.37, and the safety properties."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterio import names
from clusterio.builders import (
    JobPodsSpec,
    TenantLimits,
    VolumeSpec,
    datastore_secret_keys,
    is_reserved_env_name,
    make_datastore_secret,
    make_headless_service,
    make_learner_pod,
    make_limit_range,
    make_namespace,
    make_network_policy,
    make_resource_quota,
    make_service_account,
    to_dict,
)
from clusterio.taints import Toleration, parse_toleration
from clusterio.threads import THREAD_ENV_NAMES, thread_env, threads_for_cpu
from tests.clusterio.validation import K8S_VERSION, validated

NS = "trainyard-acme"
CREDENTIALS = {"mystore": {"access_key_id": "AKIAEXAMPLEKEY", "secret_access_key": "s3cr3t-v4lue/xyz"}}


def _spec(**overrides: Any) -> JobPodsSpec:
    fields: dict[str, Any] = {
        "job_id": 42,
        "attempt": 1,
        "tenant": "acme",
        "namespace": NS,
        "image": "registry.example/train:1",
        "command": ["python", "train.py"],
        "learners": 2,
        "gpus": 0,
        "cpu_millis": 2000,
        "memory_mib": 4096,
        "checkpoint_dir": "/checkpoints",
        "data_dir": "/data",
        "result_dir": "/results",
    }
    fields.update(overrides)
    return JobPodsSpec(**fields)


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    entries = pod["spec"]["containers"][0]["env"]
    as_dict = {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in entries}
    assert len(as_dict) == len(entries), "every env name appears once"
    return as_dict


def _all_objects() -> list[Any]:
    gpu_spec = _spec(
        gpus=4,
        gpu_type="NVIDIA-H100-80GB-HBM3",
        cpu_millis=1500,
        datastore_secret=names.datastore_secret_name(42, 1),
        datastore_keys=datastore_secret_keys(CREDENTIALS),
        volumes=[
            VolumeSpec(name="data", kind="pvc", mount_path="/data", read_only=True, claim_name="acme-data"),
            VolumeSpec(name="Node Cache", kind="host", mount_path="/cache", host_path="/mnt/cache"),
            VolumeSpec(name="raw", kind="s3", mount_path="/raw", bucket="acme-raw"),
        ],
        checkpoint_claim="acme-checkpoints",
        checkpoint_sub_path="ty-42",
        active_deadline_seconds=3600,
        extra_labels={"team": "vision"},
        env={"FOO": "bar"},
        node_names=("gpu-a", "gpu-b"),
        gpu_tolerations=(parse_toleration("nvidia.com/gpu=present:NoSchedule"), parse_toleration("*")),
        node_lost_toleration_seconds=60,
    )
    return [
        make_namespace(NS, "acme", {"cost-center": "r&d"}, pod_security="restricted"),
        make_resource_quota(NS, TenantLimits(gpus=8, cpu_millis=64000, memory_mib=262144, max_pods=50)),
        make_resource_quota(NS, TenantLimits(gpus=0, cpu_millis=500, memory_mib=512, max_pods=None)),
        make_resource_quota(NS, TenantLimits(0, 500, 512, storage_gib=500, max_claims=50)),
        make_limit_range(NS, default_cpu_millis=500, default_memory_mib=512),
        make_network_policy(NS),
        make_network_policy(NS, egress_cidrs=["10.20.0.0/16", "192.0.2.10/32"]),
        make_network_policy(NS, dns_cidrs=["169.254.20.10/32", "fd00:10::a/128"]),
        make_network_policy(NS, dns_cidrs=()),
        make_service_account(NS),
        make_learner_pod(_spec(), 0),
        make_learner_pod(gpu_spec, 1),
        make_learner_pod(_spec(job_id="J" * 200, master_addr="127.0.0.1", threads="off"), 1),
        make_headless_service(gpu_spec),
        make_datastore_secret(
            NS, names.datastore_secret_name(42, 1), names.job_labels("acme", 42, 1), CREDENTIALS
        ),
    ]


@pytest.mark.parametrize("obj", _all_objects(), ids=lambda o: f"{o.kind}-{o.metadata.name}")
def test_every_built_object_validates_strictly_against_kubernetes_1_37(obj: Any) -> None:
    validated(obj)


def test_strict_validation_rejects_unknown_fields() -> None:
    data = to_dict(make_service_account(NS))
    data["automountToken"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(data, K8S_VERSION, strict=True)


def test_cpu_only_learner_pod_matches_expected_manifest() -> None:
    expected_env = [
        {"name": "MASTER_ADDR", "value": "ty-42-a1-l0.ty-42-a1.trainyard-acme.svc"},
        {"name": "MASTER_PORT", "value": "29500"},
        {"name": "WORLD_SIZE", "value": "2"},
        {"name": "RANK", "value": "0"},
        {"name": "LOCAL_RANK", "value": "0"},
        {"name": "LOCAL_WORLD_SIZE", "value": "1"},
        {"name": "NODE_RANK", "value": "0"},
        {"name": "PET_NNODES", "value": "2"},
        {"name": "PET_NODE_RANK", "value": "0"},
        {"name": "PET_MASTER_ADDR", "value": "ty-42-a1-l0.ty-42-a1.trainyard-acme.svc"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
        {"name": "DATA_DIR", "value": "/data"},
        {"name": "RESULT_DIR", "value": "/results"},
        {"name": "CHECKPOINT_DIR", "value": "/checkpoints"},
        {"name": "JOB_ID", "value": "42"},
        {"name": "TRAINING_ID", "value": "42"},
        {"name": "LEARNER_ID", "value": "1"},
        {"name": "NUM_LEARNERS", "value": "2"},
        {"name": "TRAINYARD_ATTEMPT", "value": "1"},
        {"name": "TRAINYARD_SCRATCH_DIR", "value": "/scratch"},
        *({"name": name, "value": "2"} for name in THREAD_ENV_NAMES),
        {"name": "TRAINYARD_DATALOADER_WORKERS", "value": "1"},
        {"name": "TRAINYARD_TORCH_INTEROP_THREADS", "value": "2"},
    ]
    assert to_dict(make_learner_pod(_spec(), 0)) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "ty-42-a1-l0",
            "namespace": NS,
            "labels": {
                "trainyard.io/tenant": "acme",
                "app.kubernetes.io/managed-by": "trainyard",
                "trainyard.io/job": "42",
                "trainyard.io/attempt": "1",
                "trainyard.io/learner": "0",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "hostname": "ty-42-a1-l0",
            "subdomain": "ty-42-a1",
            "serviceAccountName": "trainyard-learner",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "learner",
                    "image": "registry.example/train:1",
                    "command": ["python", "train.py"],
                    "env": expected_env,
                    "resources": {
                        "requests": {"cpu": "2", "memory": "4096Mi"},
                        "limits": {"cpu": "2", "memory": "4096Mi"},
                    },
                    "ports": [{"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {"name": "checkpoint", "mountPath": "/checkpoints"},
                        {"name": "results", "mountPath": "/results"},
                    ],
                }
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2048Mi"}},
                {"name": "checkpoint", "emptyDir": {}},
                {"name": "results", "emptyDir": {}},
            ],
        },
    }


def test_gpu_learner_pod_requests_gpus_selects_product_and_tolerates_taint() -> None:
    pod = to_dict(make_learner_pod(_spec(gpus=4, gpu_type="NVIDIA-A100-SXM4-80GB", cpu_millis=1500), 1))
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "1500m", "memory": "4096Mi", "nvidia.com/gpu": "4"},
        "limits": {"cpu": "1500m", "memory": "4096Mi", "nvidia.com/gpu": "4"},
    }
    assert _gpu_terms(pod) == [
        {"matchExpressions": [{"key": key, "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]}
        for key in ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
    ]
    assert "nodeSelector" not in pod["spec"]
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def _gpu_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms: list[dict[str, Any]] = required["nodeSelectorTerms"]
    return terms


def test_gpu_type_alias_requires_any_of_the_resolved_product_labels_on_either_label() -> None:
    products = ("nvidia-tesla-a100", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB")
    pod = to_dict(make_learner_pod(_spec(gpus=1, gpu_type="a100", gpu_products=products), 0))
    values = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "nvidia-tesla-a100"]
    assert _gpu_terms(pod) == [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
        for key in ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
    ]


def test_gpu_learners_carry_the_configured_gpu_tolerations_and_cpu_learners_none_of_them() -> None:
    tolerations = (
        parse_toleration("nvidia.com/gpu=present:NoSchedule"),
        parse_toleration("sku=gpu:NoSchedule"),
        parse_toleration("dedicated"),
    )
    gpu = to_dict(
        make_learner_pod(_spec(gpus=1, gpu_tolerations=tolerations, node_lost_toleration_seconds=5), 0)
    )
    assert gpu["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists"},
        *(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        ),
    ]
    cpu = to_dict(
        make_learner_pod(_spec(gpus=0, gpu_tolerations=tolerations, node_lost_toleration_seconds=5), 0)
    )
    assert [t["key"] for t in cpu["spec"]["tolerations"]] == [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]


def test_each_learner_is_bound_to_the_node_admission_chose_for_it() -> None:
    spec = _spec(learners=3, node_names=("node-a", "node-b", "node-a"))
    for index, node in enumerate(spec.node_names or ()):
        pod = to_dict(make_learner_pod(spec, index))
        assert pod["spec"]["affinity"] == {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                }
            }
        }
        assert "nodeName" not in pod["spec"], "the scheduler still binds it (and checks taints and room)"


def test_without_node_names_the_scheduler_chooses() -> None:
    assert "affinity" not in to_dict(make_learner_pod(_spec(), 0))["spec"]


def test_a_gpu_type_and_a_binding_are_required_together_in_every_term() -> None:
    spec = _spec(
        learners=1, gpus=1, gpu_type="a100", gpu_products=("NVIDIA-A100-SXM4-40GB",), node_names=("gpu-3",)
    )
    binding = [{"key": "metadata.name", "operator": "In", "values": ["gpu-3"]}]
    assert _gpu_terms(to_dict(make_learner_pod(spec, 0))) == [
        {
            "matchExpressions": [{"key": key, "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB"]}],
            "matchFields": binding,
        }
        for key in ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
    ]


def test_cpu_only_pod_has_no_gpu_resource_toleration_or_selector() -> None:
    pod = to_dict(make_learner_pod(_spec(gpus=0, gpu_type=None), 0))
    assert "nvidia.com/gpu" not in json.dumps(pod["spec"]["containers"][0]["resources"])
    assert "tolerations" not in pod["spec"]
    assert "nodeSelector" not in pod["spec"] and "affinity" not in pod["spec"]


def test_gpu_type_without_gpus_still_selects_the_product_but_requests_no_gpu() -> None:
    pod = to_dict(make_learner_pod(_spec(gpus=0, gpu_type="NVIDIA-H100"), 0))
    assert _gpu_terms(pod)[0]["matchExpressions"][0]["values"] == ["NVIDIA-H100"]
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize(
    ("cpu_millis", "threads"), [(1, 1), (999, 1), (1000, 1), (1001, 2), (1500, 2), (64000, 64)]
)
def test_thread_env_is_ceil_of_cpu_limit(cpu_millis: int, threads: int) -> None:
    env = _env(to_dict(make_learner_pod(_spec(cpu_millis=cpu_millis), 0)))
    for name in THREAD_ENV_NAMES:
        assert env[name] == str(threads)
    assert env["TRAINYARD_DATALOADER_WORKERS"] == str(threads - 1)


@given(st.integers(min_value=1, max_value=10**7))
def test_thread_count_is_ceil_of_cpu_and_at_least_one(cpu_millis: int) -> None:
    threads = threads_for_cpu(cpu_millis)
    assert threads >= 1
    assert (threads - 1) * 1000 < cpu_millis <= threads * 1000
    assert set(thread_env(cpu_millis).values()) == {str(threads), str(threads - 1)}


def test_thread_env_never_reads_the_hosts_cpu_count() -> None:
    before = to_dict(make_learner_pod(_spec(cpu_millis=3000), 0))
    with (
        mock.patch.object(os, "cpu_count", return_value=4096),
        mock.patch.object(os, "sched_getaffinity", return_value=set(range(4096)), create=True),
        mock.patch.object(multiprocessing, "cpu_count", return_value=4096),
    ):
        after = to_dict(make_learner_pod(_spec(cpu_millis=3000), 0))
        assert thread_env(3000)["OMP_NUM_THREADS"] == "3"
    assert after == before
    assert _env(after)["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize("bad", [0, -1000, True])
def test_thread_env_rejects_non_positive_cpu(bad: int) -> None:
    with pytest.raises(ValueError, match="cpu_millis"):
        thread_env(bad)


def test_torch_num_threads_is_not_set_because_torch_does_not_read_it() -> None:
    assert "TORCH_NUM_THREADS" not in _env(to_dict(make_learner_pod(_spec(), 0)))


def test_threads_off_sets_no_thread_env_and_lets_the_user_choose() -> None:
    env = _env(to_dict(make_learner_pod(_spec(threads="off", env={"OMP_NUM_THREADS": "1"}), 0)))
    assert env["OMP_NUM_THREADS"] == "1"
    assert not (set(THREAD_ENV_NAMES) - {"OMP_NUM_THREADS"}) & set(env)
    assert "TRAINYARD_DATALOADER_WORKERS" not in env


PLATFORM_NAMES = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "DATA_DIR",
    "RESULT_DIR",
    "CHECKPOINT_DIR",
    "JOB_ID",
    "LEARNER_ID",
    "NUM_LEARNERS",
    "TRAINYARD_ATTEMPT",
    "TRAINYARD_ANYTHING",
    "OMP_NUM_THREADS",
    "TF_NUM_INTEROP_THREADS",
]


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_user_env_cannot_override_platform_env(name: str) -> None:
    plain = _env(to_dict(make_learner_pod(_spec(), 1)))
    hijacked = _env(to_dict(make_learner_pod(_spec(env={name: "hijacked", "FOO": "bar"}), 1)))
    assert is_reserved_env_name(name)
    assert hijacked.get(name) == plain.get(name)
    assert "hijacked" not in hijacked.values()
    assert hijacked["FOO"] == "bar"


def test_user_env_cannot_override_datastore_credentials() -> None:
    spec = _spec(
        datastore_secret="ty-42-a1-ds",
        datastore_keys=datastore_secret_keys(CREDENTIALS),
        env={"MYSTORE_ACCESS_KEY_ID": "mine"},
    )
    env = _env(to_dict(make_learner_pod(spec, 0)))
    assert env["MYSTORE_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "ty-42-a1-ds", "key": "MYSTORE_ACCESS_KEY_ID", "optional": False}
    }


def test_credentials_reach_the_pod_only_through_secret_key_refs() -> None:
    secret_name = names.datastore_secret_name(42, 1)
    secret = to_dict(make_datastore_secret(NS, secret_name, names.job_labels("acme", 42, 1), CREDENTIALS))
    spec = _spec(datastore_secret=secret_name, datastore_keys=datastore_secret_keys(CREDENTIALS))
    pod = to_dict(make_learner_pod(spec, 0))
    serialized = json.dumps(pod)
    for fields in CREDENTIALS.values():
        for value in fields.values():
            assert value not in serialized
    env = _env(pod)
    for key in secret["stringData"]:
        assert env[key] == {"secretKeyRef": {"name": secret_name, "key": key, "optional": False}}


def test_datastore_secret_matches_expected_manifest() -> None:
    secret = make_datastore_secret(NS, "ty-42-a1-ds", names.job_labels("acme", 42, 1), CREDENTIALS)
    assert to_dict(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "ty-42-a1-ds",
            "namespace": NS,
            "labels": {
                "trainyard.io/tenant": "acme",
                "app.kubernetes.io/managed-by": "trainyard",
                "trainyard.io/job": "42",
                "trainyard.io/attempt": "1",
            },
        },
        "stringData": {
            "MYSTORE_ACCESS_KEY_ID": "AKIAEXAMPLEKEY",
            "MYSTORE_SECRET_ACCESS_KEY": "s3cr3t-v4lue/xyz",
        },
    }


def test_datastore_keys_are_env_name_safe() -> None:
    keys = datastore_secret_keys({"my-store.eu": {"access key": "a"}, "9lives": {"token": "b"}})
    assert keys == ("MY_STORE_EU_ACCESS_KEY", "_9LIVES_TOKEN")


def test_datastore_keys_that_collide_are_refused() -> None:
    with pytest.raises(ValueError, match="both map to"):
        datastore_secret_keys({"my-store": {"key": "a"}, "my_store": {"key": "b"}})


def test_datastore_keys_cannot_shadow_platform_env() -> None:
    with pytest.raises(ValueError, match="platform"):
        datastore_secret_keys({"job": {"id": "x"}})


def test_learners_get_their_rank_and_one_based_learner_id() -> None:
    spec = _spec(learners=3)
    for index in range(3):
        env = _env(to_dict(make_learner_pod(spec, index)))
        assert (env["RANK"], env["NODE_RANK"], env["LEARNER_ID"]) == (str(index), str(index), str(index + 1))
        assert env["WORLD_SIZE"] == env["NUM_LEARNERS"] == "3"
        assert env["MASTER_ADDR"] == "ty-42-a1-l0.ty-42-a1.trainyard-acme.svc"


def test_master_addr_can_be_overridden_for_clusters_without_pod_dns() -> None:
    env = _env(to_dict(make_learner_pod(_spec(master_addr="127.0.0.1", master_port=31000), 1)))
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "31000")


@pytest.mark.parametrize("index", [-1, 2])
def test_learner_index_outside_the_job_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        make_learner_pod(_spec(learners=2), index)


def test_pods_run_as_non_root_without_privileges_or_api_token() -> None:
    pod = to_dict(make_learner_pod(_spec(), 0))
    container = pod["spec"]["containers"][0]["securityContext"]
    assert container["runAsNonRoot"] is True
    assert container["runAsUser"] == 1000
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert container["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["readOnlyRootFilesystem"] is False
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["enableServiceLinks"] is False


def test_active_deadline_is_set_when_given() -> None:
    pod = to_dict(make_learner_pod(_spec(active_deadline_seconds=7200), 0))
    assert pod["spec"]["activeDeadlineSeconds"] == 7200
    assert "activeDeadlineSeconds" not in to_dict(make_learner_pod(_spec(), 0))["spec"]


def test_checkpoint_claim_mounts_a_pvc_at_the_checkpoint_dir() -> None:
    pod = to_dict(make_learner_pod(_spec(checkpoint_claim="acme-ckpt", checkpoint_sub_path="ty-42"), 0))
    assert {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "acme-ckpt"}} in pod["spec"][
        "volumes"
    ]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "checkpoint", "mountPath": "/checkpoints", "subPath": "ty-42"} in mounts


def test_checkpoint_host_path_mounts_a_node_folder_that_outlives_the_pod() -> None:
    pod = to_dict(make_learner_pod(_spec(checkpoint_host_path="/var/ty/ckpt/acme/42"), 0))
    expected = {
        "name": "checkpoint",
        "hostPath": {"path": "/var/ty/ckpt/acme/42", "type": "DirectoryOrCreate"},
    }
    assert expected in pod["spec"]["volumes"]


def test_checkpoint_claim_and_host_path_together_are_refused() -> None:
    with pytest.raises(ValueError, match="give one of"):
        _spec(checkpoint_claim="c", checkpoint_host_path="/x")


def test_spec_volumes_are_mounted_by_kind() -> None:
    volumes = [
        VolumeSpec(name="data", kind="pvc", mount_path="/data", read_only=True, claim_name="acme-data"),
        VolumeSpec(name="cache", kind="host", mount_path="/cache", host_path="/mnt/cache"),
        VolumeSpec(name="raw", kind="s3", mount_path="/raw", bucket="acme-raw", read_only=True),
    ]
    pod = to_dict(make_learner_pod(_spec(volumes=volumes), 0))
    assert pod["spec"]["volumes"][3:] == [
        {"name": "vol-data", "persistentVolumeClaim": {"claimName": "acme-data", "readOnly": True}},
        {"name": "vol-cache", "hostPath": {"path": "/mnt/cache", "type": "Directory"}},
        {"name": "vol-raw", "emptyDir": {}},
        {"name": "results", "emptyDir": {}},
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"][3:] == [
        {"name": "vol-data", "mountPath": "/data", "readOnly": True},
        {"name": "vol-cache", "mountPath": "/cache", "readOnly": False},
        {"name": "vol-raw", "mountPath": "/raw", "readOnly": True},
        {"name": "results", "mountPath": "/results"},
    ]


def test_a_results_volume_replaces_the_platforms_own_results_folder() -> None:
    volumes = [VolumeSpec(name="out", kind="pvc", mount_path="/results/", claim_name="acme-out")]
    pod = to_dict(make_learner_pod(_spec(volumes=volumes), 0))
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["scratch", "dshm", "checkpoint", "vol-out"]


def test_two_volumes_on_one_mount_path_are_refused() -> None:
    volumes = [VolumeSpec(name="ckpt", kind="pvc", mount_path="/checkpoints/", claim_name="c")]
    with pytest.raises(ValueError, match="duplicate mount path"):
        make_learner_pod(_spec(volumes=volumes), 0)


def test_volume_without_its_source_is_refused() -> None:
    with pytest.raises(ValueError, match="claim_name"):
        VolumeSpec(name="data", kind="pvc", mount_path="/data")


@pytest.mark.parametrize(
    "overrides",
    [
        {"learners": 0},
        {"gpus": -1},
        {"cpu_millis": 0},
        {"threads": "max"},
        {"command": "python x.py"},
        {"master_port": 70000},
        {"datastore_keys": ("X",)},
        {"run_as_user": 0},
        {"node_names": ("only-one",)},
        {"node_names": ("a", "")},
        {"node_names": "ab"},
        {"gpu_tolerations": [Toleration(key="nvidia.com/gpu", operator="Exists")]},
    ],
)
def test_invalid_job_specs_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _spec(**overrides)


def test_specs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _spec().gpus = 8  # type: ignore[misc]


def test_platform_labels_win_over_extra_labels() -> None:
    pod = to_dict(make_learner_pod(_spec(extra_labels={"trainyard.io/job": "other", "team": "vision"}), 0))
    assert pod["metadata"]["labels"]["trainyard.io/job"] == "42"
    assert pod["metadata"]["labels"]["team"] == "vision"


def test_long_job_ids_still_give_valid_hostnames_and_subdomains() -> None:
    pod = validated(make_learner_pod(_spec(job_id="Experiment/" * 20), 1))
    assert len(pod["spec"]["hostname"]) <= 63
    assert len(pod["spec"]["subdomain"]) <= 63
    assert pod["spec"]["hostname"] == pod["metadata"]["name"]


def test_headless_service_matches_expected_manifest_and_selects_the_attempts_pods() -> None:
    spec = _spec()
    service = to_dict(make_headless_service(spec))
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "ty-42-a1",
            "namespace": NS,
            "labels": {
                "trainyard.io/tenant": "acme",
                "app.kubernetes.io/managed-by": "trainyard",
                "trainyard.io/job": "42",
                "trainyard.io/attempt": "1",
            },
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"trainyard.io/job": "42", "trainyard.io/attempt": "1"},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}],
        },
    }
    for index in range(spec.learners):
        pod = to_dict(make_learner_pod(spec, index))
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    other_attempt = to_dict(make_learner_pod(_spec(attempt=2), 0))
    assert not service["spec"]["selector"].items() <= other_attempt["metadata"]["labels"].items()


def test_namespace_carries_tenant_and_managed_labels() -> None:
    assert to_dict(make_namespace(NS, "acme", {"cost-center": "r&d"}, pod_security="restricted")) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NS,
            "labels": {
                "cost-center": "r-d-" + names.short_hash("r&d"),
                "trainyard.io/tenant": "acme",
                "app.kubernetes.io/managed-by": "trainyard",
                "pod-security.kubernetes.io/enforce": "restricted",
            },
        },
    }


def test_resource_quota_caps_requests_limits_gpus_and_pods() -> None:
    quota = to_dict(
        make_resource_quota(NS, TenantLimits(gpus=8, cpu_millis=64500, memory_mib=262144, max_pods=50))
    )
    assert quota == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "trainyard-quota",
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "trainyard"},
        },
        "spec": {
            "hard": {
                "requests.cpu": "64500m",
                "limits.cpu": "64500m",
                "requests.memory": "262144Mi",
                "limits.memory": "262144Mi",
                "requests.nvidia.com/gpu": "8",
                "pods": "50",
            }
        },
    }


def test_resource_quota_caps_claim_storage_and_count_when_given() -> None:
    quota = to_dict(make_resource_quota(NS, TenantLimits(0, 1000, 1024, storage_gib=200, max_claims=20)))
    assert quota["spec"]["hard"]["requests.storage"] == "200Gi"
    assert quota["spec"]["hard"]["persistentvolumeclaims"] == "20"
    assert (
        "requests.storage"
        not in to_dict(make_resource_quota(NS, TenantLimits(0, 1000, 1024)))["spec"]["hard"]
    )


def test_resource_quota_without_pod_cap_omits_pods() -> None:
    quota = to_dict(make_resource_quota(NS, TenantLimits(gpus=0, cpu_millis=1000, memory_mib=1024)))
    assert "pods" not in quota["spec"]["hard"]
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"


def test_limit_range_defaults_request_to_limit() -> None:
    limit_range = to_dict(make_limit_range(NS, default_cpu_millis=500, default_memory_mib=512))
    assert limit_range["spec"] == {
        "limits": [
            {
                "type": "Container",
                "default": {"cpu": "500m", "memory": "512Mi"},
                "defaultRequest": {"cpu": "500m", "memory": "512Mi"},
            }
        ]
    }


def test_network_policy_matches_expected_manifest() -> None:
    assert to_dict(make_network_policy(NS))["spec"] == {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
        "egress": [
            {"to": [{"podSelector": {}}]},
            {
                "to": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
                    {"ipBlock": {"cidr": "169.254.20.10/32"}},
                ],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
        ],
    }


def test_network_policy_lets_dns_reach_kube_dns_and_the_node_local_cache_on_port_53_only() -> None:
    kube_system = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    dns_ports = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    custom = to_dict(make_network_policy(NS, dns_cidrs=["10.96.0.10/32", "fd00:10::a/128"]))["spec"]
    assert custom["egress"][1] == {
        "to": [kube_system, {"ipBlock": {"cidr": "10.96.0.10/32"}}, {"ipBlock": {"cidr": "fd00:10::a/128"}}],
        "ports": dns_ports,
    }
    without = to_dict(make_network_policy(NS, dns_cidrs=()))["spec"]
    assert without["egress"][1] == {"to": [kube_system], "ports": dns_ports}
    node_local = to_dict(make_network_policy(NS, egress_cidrs=["10.20.0.0/16"]))["spec"]["egress"]
    assert [rule for rule in node_local if {"ipBlock": {"cidr": "169.254.20.10/32"}} in rule["to"]] == [
        {"to": [kube_system, {"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": dns_ports}
    ], "the cache's address is reachable on port 53 only"


def test_network_policy_denies_other_namespaces() -> None:
    spec = to_dict(make_network_policy(NS))["spec"]
    assert spec["podSelector"] == {}, "applies to every pod of the namespace"
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}, "both directions default-deny"
    for rule in spec["ingress"]:
        for peer in rule["from"]:
            assert peer == {"podSelector": {}}, "a bare podSelector means this namespace only"
    for rule in spec["egress"]:
        for peer in rule["to"]:
            if "namespaceSelector" in peer or "ipBlock" in peer:
                assert peer in (
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
                    {"ipBlock": {"cidr": "169.254.20.10/32"}},
                )
                assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("UDP", 53), ("TCP", 53)}
            else:
                assert peer == {"podSelector": {}}


def test_network_policy_egress_cidrs_are_opt_in() -> None:
    spec = to_dict(make_network_policy(NS, egress_cidrs=["10.20.0.0/16"]))["spec"]
    assert spec["egress"][-1] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}


def test_service_account_has_no_token() -> None:
    assert to_dict(make_service_account(NS)) == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainyard-learner",
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "trainyard"},
        },
        "automountServiceAccountToken": False,
    }


def test_builders_are_deterministic() -> None:
    first = [to_dict(obj) for obj in _all_objects()]
    second = [to_dict(obj) for obj in _all_objects()]
    assert first == second
