"""Artifact builders: the fetch init container, the launcher wrapping, the token Secret, the checkpoint PVC.

Every object is validated strictly against Kubernetes 1.37, and no token or credential value may
appear anywhere in a pod: the pods only reference the attempt's Secret.
"""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

import pytest

from clusterio import names
from clusterio.builders import (
    TOKEN_ENV,
    ArtifactSpec,
    JobPodsSpec,
    S3Fetch,
    VolumeSpec,
    datastore_secret_keys,
    make_checkpoint_pvc,
    make_datastore_secret,
    make_job_checkpoint_pvcs,
    make_learner_pod,
    to_dict,
)
from clusterio.podkit import FETCH_SOURCE, LAUNCHER_SOURCE
from tests.clusterio.validation import validated

NS = "trainyard-acme"
TOKEN = "signed-attempt-token:abc123"
CREDENTIALS = {"mystore": {"access_key_id": "AKIAEXAMPLEKEY", "secret_access_key": "s3cr3t-v4lue/xyz"}}
SHA = "ab" * 32
SECRET = names.datastore_secret_name(42, 1)
S3 = S3Fetch(
    bucket="acme-datasets",
    prefix="mnist/",
    target="/data/mnist",
    endpoint="https://s3.example",
    access_key_env="MYSTORE_ACCESS_KEY_ID",
    secret_key_env="MYSTORE_SECRET_ACCESS_KEY",
)


def _artifacts(**overrides: Any) -> ArtifactSpec:
    fields: dict[str, Any] = {
        "code_url": "https://trainyard.example/api/v1/artifacts/jobs/42/attempts/1/code",
        "code_sha256": SHA,
        "results_url": "https://trainyard.example/api/v1/artifacts/jobs/42/attempts/1/results",
        "fetch_image": "registry.example/trainyard:1",
    }
    fields.update(overrides)
    return ArtifactSpec(**fields)


def _spec(**overrides: Any) -> JobPodsSpec:
    fields: dict[str, Any] = {
        "job_id": 42,
        "attempt": 1,
        "tenant": "acme",
        "namespace": NS,
        "image": "registry.example/train:1",
        "command": ["/bin/sh", "-c", "python train.py --epochs 3"],
        "learners": 2,
        "gpus": 0,
        "cpu_millis": 2000,
        "memory_mib": 4096,
        "checkpoint_dir": "/checkpoints",
        "data_dir": "/data",
        "result_dir": "/results",
        "artifacts": _artifacts(),
    }
    fields.update(overrides)
    return JobPodsSpec(**fields)


def _s3_spec(**artifact_overrides: Any) -> JobPodsSpec:
    return _spec(
        datastore_secret=SECRET,
        datastore_keys=datastore_secret_keys(CREDENTIALS),
        volumes=[VolumeSpec(name="data", kind="s3", mount_path="/data", bucket="acme-datasets")],
        artifacts=_artifacts(s3_fetch=(S3,), **artifact_overrides),
    )


def _env(container: dict[str, Any]) -> dict[str, Any]:
    entries = container["env"]
    as_dict = {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in entries}
    assert len(as_dict) == len(entries), "every env name appears once"
    return as_dict


def _ref(secret: str, key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": secret, "key": key, "optional": False}}


VALIDATED = {
    "code-results-s3": lambda: make_learner_pod(_s3_spec(), 1),
    "results-only": lambda: make_learner_pod(_spec(artifacts=ArtifactSpec(results_url="http://p/r")), 0),
    "code-only": lambda: make_learner_pod(_spec(artifacts=_artifacts(results_url=None)), 0),
    "gpu-with-claim": lambda: make_learner_pod(
        _spec(gpus=2, checkpoint_claim=names.checkpoint_claim_name(42), checkpoint_claim_size="20Gi"), 0
    ),
    "secret-with-token": lambda: make_datastore_secret(
        NS, SECRET, names.job_labels("acme", 42, 1), CREDENTIALS, artifact_token=TOKEN
    ),
    "secret-token-only": lambda: make_datastore_secret(
        NS, SECRET, names.job_labels("acme", 42, 1), {}, artifact_token=TOKEN
    ),
    "pvc-default-class": lambda: make_checkpoint_pvc(NS, "ty-42-ckpt", {}, None, "10Gi"),
    "pvc-rwx": lambda: make_checkpoint_pvc(NS, "ty-42-ckpt", {}, "nfs", "1Ti", ("ReadWriteMany",)),
    "uid-from-namespace": lambda: make_learner_pod(_spec(run_as_user=None), 0),
    "gpu-with-learner-claim": lambda: make_learner_pod(
        _spec(
            gpus=1,
            checkpoint_learner_claims=(
                names.checkpoint_claim_name(42, 0),
                names.checkpoint_claim_name(42, 1),
            ),
            checkpoint_claim_size="20Gi",
        ),
        1,
    ),
}


@pytest.mark.parametrize("case", sorted(VALIDATED))
def test_artifact_objects_validate_strictly_against_kubernetes_1_37(case: str) -> None:
    validated(VALIDATED[case]())


def test_fetch_init_container_matches_expected_manifest() -> None:
    pod = validated(make_learner_pod(_s3_spec(fetch_cpu_millis=500, fetch_memory_mib=512), 0))
    (init,) = pod["spec"]["initContainers"]
    (main,) = pod["spec"]["containers"]
    assert init == {
        "name": "fetch",
        "image": "registry.example/trainyard:1",
        "command": ["python3", "-c", FETCH_SOURCE],
        "env": [
            {"name": "MODEL_DIR", "value": "/trainyard/model"},
            {"name": "TRAINYARD_CODE_URL", "value": _artifacts().code_url},
            {"name": "TRAINYARD_CODE_SHA256", "value": SHA},
            {"name": "TRAINYARD_CODE_MAX_UNPACKED", "value": str(1 << 30)},
            {"name": "TRAINYARD_S3_FETCH", "value": json.dumps([S3.as_json()])},
            {"name": TOKEN_ENV, "valueFrom": _ref(SECRET, TOKEN_ENV)},
            {"name": "MYSTORE_ACCESS_KEY_ID", "valueFrom": _ref(SECRET, "MYSTORE_ACCESS_KEY_ID")},
            {"name": "MYSTORE_SECRET_ACCESS_KEY", "valueFrom": _ref(SECRET, "MYSTORE_SECRET_ACCESS_KEY")},
        ],
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
        "volumeMounts": main["volumeMounts"],
        "securityContext": main["securityContext"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    assert {"name": "model", "mountPath": "/trainyard/model"} in main["volumeMounts"]
    assert {"name": "model", "emptyDir": {}} in pod["spec"]["volumes"]
    assert json.loads(_env(init)["TRAINYARD_S3_FETCH"]) == [
        {
            "endpoint": "https://s3.example",
            "bucket": "acme-datasets",
            "prefix": "mnist/",
            "target": "/data/mnist",
            "access_key_env": "MYSTORE_ACCESS_KEY_ID",
            "secret_key_env": "MYSTORE_SECRET_ACCESS_KEY",
        }
    ]


def test_fetch_init_container_never_asks_for_more_than_the_learner() -> None:
    pod = to_dict(make_learner_pod(_spec(cpu_millis=250, memory_mib=256), 0))
    resources = pod["spec"]["initContainers"][0]["resources"]
    assert resources["limits"] == resources["requests"] == {"cpu": "250m", "memory": "256Mi"}


def test_launcher_wraps_the_users_argv_unchanged_and_runs_in_the_code_folder() -> None:
    (main,) = to_dict(make_learner_pod(_spec(), 0))["spec"]["containers"]
    assert main["command"] == [
        "python3",
        "-c",
        LAUNCHER_SOURCE,
        "/bin/sh",
        "-c",
        "python train.py --epochs 3",
    ]
    assert main["workingDir"] == "/trainyard/model"
    env = _env(main)
    assert env["MODEL_DIR"] == "/trainyard/model"
    assert env["TRAINYARD_RESULTS_URL"] == _artifacts().results_url
    assert env[TOKEN_ENV] == _ref(SECRET, TOKEN_ENV)
    assert env["RESULT_DIR"] == "/results" and env["CHECKPOINT_DIR"] == "/checkpoints"


def test_results_only_has_no_init_container_and_keeps_the_images_working_dir() -> None:
    pod = to_dict(make_learner_pod(_spec(artifacts=ArtifactSpec(results_url="http://p/r")), 0))
    assert "initContainers" not in pod["spec"]
    (main,) = pod["spec"]["containers"]
    assert "workingDir" not in main
    assert main["command"][:3] == ["python3", "-c", LAUNCHER_SOURCE]


def test_code_without_results_url_runs_the_command_unwrapped() -> None:
    (main,) = to_dict(make_learner_pod(_spec(artifacts=_artifacts(results_url=None)), 0))["spec"][
        "containers"
    ]
    assert main["command"] == ["/bin/sh", "-c", "python train.py --epochs 3"]
    assert "TRAINYARD_RESULTS_URL" not in _env(main)


def test_without_artifacts_the_pod_is_unchanged() -> None:
    pod = to_dict(make_learner_pod(_spec(artifacts=None), 0))
    assert "initContainers" not in pod["spec"]
    (main,) = pod["spec"]["containers"]
    assert main["command"] == ["/bin/sh", "-c", "python train.py --epochs 3"]
    assert not {"MODEL_DIR", TOKEN_ENV, "TRAINYARD_RESULTS_URL"} & set(_env(main))
    assert all(v["name"] != "model" for v in pod["spec"]["volumes"])


def test_user_env_cannot_override_artifact_env() -> None:
    spec = _spec(env={"MODEL_DIR": "/elsewhere", TOKEN_ENV: "forged", "TRAINYARD_RESULTS_URL": "http://evil"})
    env = _env(to_dict(make_learner_pod(spec, 0))["spec"]["containers"][0])
    assert env["MODEL_DIR"] == "/trainyard/model"
    assert env[TOKEN_ENV] == _ref(SECRET, TOKEN_ENV)
    assert env["TRAINYARD_RESULTS_URL"] == _artifacts().results_url


def test_no_token_or_credential_value_appears_anywhere_in_the_pod() -> None:
    pod = to_dict(make_learner_pod(_s3_spec(), 0))
    text = json.dumps(pod)
    secrets = [TOKEN, *(value for fields in CREDENTIALS.values() for value in fields.values())]
    assert not [value for value in secrets if value in text]
    sensitive = {TOKEN_ENV, *datastore_secret_keys(CREDENTIALS)}
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        for entry in container["env"]:
            if entry["name"] in sensitive:
                assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], entry


def test_the_token_lives_in_the_attempts_secret_next_to_the_credentials() -> None:
    secret = to_dict(
        make_datastore_secret(NS, SECRET, names.job_labels("acme", 42, 1), CREDENTIALS, artifact_token=TOKEN)
    )
    assert secret["stringData"] == {
        "MYSTORE_ACCESS_KEY_ID": "AKIAEXAMPLEKEY",
        "MYSTORE_SECRET_ACCESS_KEY": "s3cr3t-v4lue/xyz",
        TOKEN_ENV: TOKEN,
    }
    token_only = to_dict(make_datastore_secret(NS, SECRET, {}, {}, artifact_token=TOKEN))
    assert token_only["stringData"] == {TOKEN_ENV: TOKEN}


def test_init_container_only_gets_the_credentials_its_downloads_use() -> None:
    credentials = {**CREDENTIALS, "other": {"password": "hunter2"}}
    spec = _spec(
        datastore_secret=SECRET,
        datastore_keys=datastore_secret_keys(credentials),
        artifacts=_artifacts(s3_fetch=(S3,)),
        volumes=[VolumeSpec(name="data", kind="s3", mount_path="/data", bucket="b")],
    )
    pod = to_dict(make_learner_pod(spec, 0))
    assert "OTHER_PASSWORD" not in _env(pod["spec"]["initContainers"][0])
    assert "OTHER_PASSWORD" in _env(pod["spec"]["containers"][0]), "the learner keeps every data-store key"


@pytest.mark.parametrize(
    ("target", "volumes"),
    [
        ("/opt/data", []),
        ("/data/x", [VolumeSpec(name="d", kind="pvc", mount_path="/data", claim_name="c", read_only=True)]),
        ("/database", [VolumeSpec(name="d", kind="s3", mount_path="/data", bucket="b")]),
    ],
    ids=["no-volume", "read-only-volume", "prefix-is-not-a-folder"],
)
def test_s3_target_outside_a_writable_volume_is_refused(target: str, volumes: list[VolumeSpec]) -> None:
    fetch = S3Fetch(bucket="b", target=target)
    with pytest.raises(ValueError, match="not inside a writable volume"):
        make_learner_pod(_spec(volumes=volumes, artifacts=_artifacts(s3_fetch=(fetch,))), 0)


def test_s3_target_in_the_code_folder_is_allowed() -> None:
    fetch = S3Fetch(bucket="b", target="/trainyard/model/data")
    validated(make_learner_pod(_spec(artifacts=_artifacts(s3_fetch=(fetch,))), 0))


def test_model_dir_on_another_mount_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate mount path"):
        make_learner_pod(_spec(artifacts=_artifacts(model_dir="/checkpoints/")), 0)


@pytest.mark.parametrize(
    "overrides",
    [
        {"code_sha256": None},
        {"code_url": None},
        {"code_sha256": "AB" * 32},
        {"code_sha256": "ab" * 31},
        {"fetch_image": ""},
        {"model_dir": "model"},
        {"model_dir": "/"},
        {"code_max_unpacked": 0},
        {"fetch_cpu_millis": 0},
        {"s3_fetch": [S3]},
        {"python": ""},
    ],
)
def test_invalid_artifact_specs_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _artifacts(**overrides)


@pytest.mark.parametrize(
    "fields",
    [
        {"bucket": "", "target": "/data"},
        {"bucket": "b", "target": "data"},
        {"bucket": "b", "target": "/data", "access_key_env": "A"},
        {"bucket": "b", "target": "/data", "access_key_env": "A-B", "secret_key_env": "C"},
    ],
)
def test_invalid_s3_fetches_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        S3Fetch(**fields)


def test_s3_credentials_must_come_from_the_attempts_secret() -> None:
    with pytest.raises(ValueError, match="not one of datastore_keys"):
        _spec(artifacts=_artifacts(s3_fetch=(S3,)))


def _checkpoint_volume(spec: JobPodsSpec, index: int) -> dict[str, Any]:
    volumes = to_dict(make_learner_pod(spec, index))["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == "checkpoint")


def test_each_learner_gets_a_readwriteonce_checkpoint_claim_of_its_own() -> None:
    spec = _spec(
        checkpoint_learner_claims=(names.checkpoint_claim_name(42, 0), names.checkpoint_claim_name(42, 1)),
        checkpoint_claim_size="20Gi",
    )
    assert [validated(claim) for claim in make_job_checkpoint_pvcs(spec)] == [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": f"ty-42-ckpt-{index}",
                "namespace": NS,
                "labels": {
                    names.LABEL_TENANT: "acme",
                    names.LABEL_JOB: "42",
                    names.LABEL_LEARNER: str(index),
                    names.LABEL_MANAGED_BY: names.MANAGED_BY,
                },
            },
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}},
        }
        for index in (0, 1)
    ]
    for index in (0, 1):
        claim = {"claimName": f"ty-42-ckpt-{index}"}
        assert _checkpoint_volume(spec, index) == {"name": "checkpoint", "persistentVolumeClaim": claim}


def test_learners_share_one_readwritemany_checkpoint_claim_when_configured() -> None:
    spec = _spec(
        checkpoint_claim=names.checkpoint_claim_name(42),
        checkpoint_claim_size="20Gi",
        checkpoint_storage_class="nfs",
        checkpoint_access_modes=("ReadWriteMany",),
    )
    assert [validated(claim) for claim in make_job_checkpoint_pvcs(spec)] == [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "ty-42-ckpt",
                "namespace": NS,
                "labels": {
                    names.LABEL_TENANT: "acme",
                    names.LABEL_JOB: "42",
                    names.LABEL_MANAGED_BY: names.MANAGED_BY,
                },
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "nfs",
                "resources": {"requests": {"storage": "20Gi"}},
            },
        }
    ]
    for index in (0, 1):
        claim = {"claimName": "ty-42-ckpt"}
        assert _checkpoint_volume(spec, index) == {"name": "checkpoint", "persistentVolumeClaim": claim}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"checkpoint_learner_claims": ("a",)}, "names 1 claims for 2 learners"),
        ({"checkpoint_learner_claims": ("a", "b"), "checkpoint_claim": "c"}, "give one of"),
        ({"checkpoint_learner_claims": ("a", "b"), "checkpoint_host_path": "/ckpt"}, "give one of"),
        ({"checkpoint_claim": "c", "checkpoint_host_path": "/ckpt"}, "give one of"),
    ],
)
def test_checkpoint_places_are_one_of_shared_claim_learner_claims_or_node_folder(
    fields: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        _spec(**fields)


@pytest.mark.parametrize("size", ["", "lots", "0", "-1Gi"])
def test_checkpoint_pvc_needs_a_positive_size(size: str) -> None:
    with pytest.raises(ValueError, match="positive quantity"):
        make_checkpoint_pvc(NS, "ty-42-ckpt", {}, None, size)


def test_checkpoint_claim_size_needs_a_claim() -> None:
    with pytest.raises(ValueError, match="needs checkpoint_claim"):
        _spec(checkpoint_claim_size="1Gi")


@pytest.mark.parametrize("job_id", [42, "J" * 200, "Experiment/7", "k" * 50, "k" * 56])
def test_checkpoint_claim_names_are_valid_and_attempt_independent(job_id: Any) -> None:
    name = names.checkpoint_claim_name(job_id)
    assert names.DNS_LABEL_RE.match(name) and len(name) <= names.DNS_LABEL_MAX
    assert name.startswith(names.OBJECT_PREFIX + "-") and name.endswith("-ckpt")
    learners = [names.checkpoint_claim_name(job_id, index) for index in (0, 1, 9999)]
    for index, learner in zip((0, 1, 9999), learners, strict=True):
        assert names.DNS_LABEL_RE.match(learner) and len(learner) <= names.DNS_LABEL_MAX
        assert learner.endswith(f"-ckpt-{index}")
    # Every learner's claim shares one cut of the job id.
    assert len({learner.rsplit("-ckpt-", 1)[0] for learner in learners}) == 1
    assert len({name, *learners}) == 4


@pytest.mark.parametrize("source", [FETCH_SOURCE, LAUNCHER_SOURCE], ids=["fetch", "launcher"])
def test_pod_programs_import_only_the_stdlib_and_boto3(source: str) -> None:
    tree = ast.parse(source, feature_version=(3, 9))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - set(sys.stdlib_module_names) <= {"boto3", "botocore"}
    assert "__file__" not in source


def test_a_uid_left_to_the_namespace_sets_no_user_group_or_fs_group_yet_stays_non_root() -> None:
    pod = validated(make_learner_pod(_spec(run_as_user=None), 0))
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert [c["name"] for c in containers] == ["fetch", "learner"]
    for container in containers:
        assert container["securityContext"] == {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    fixed = validated(make_learner_pod(_spec(run_as_user=1000650000), 0))
    assert {k: fixed["spec"]["securityContext"].get(k) for k in ("runAsUser", "runAsGroup", "fsGroup")} == {
        "runAsUser": 1000650000,
        "runAsGroup": 1000650000,
        "fsGroup": 1000650000,
    }
    assert {
        c["securityContext"]["runAsUser"]
        for c in fixed["spec"]["initContainers"] + fixed["spec"]["containers"]
    } == {1000650000}
