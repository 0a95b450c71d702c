"""Builders for moving code, data, results and checkpoints in and out of learner pods.

The pieces docs/artifacts.md describes: the `fetch` init container, the launcher wrapping the
user's command, the env both read (the token only ever through the attempt's Secret), the
emptyDir the code is unpacked into, and the checkpoint PVCs (per job or per learner) that outlive attempts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from kubernetes import client
from kubernetes.utils import parse_quantity

from clusterio import names
from clusterio.builders.quantities import cpu_quantity, memory_quantity
from clusterio.builders.specs import AccessMode, ArtifactSpec, JobPodsSpec
from clusterio.podkit import FETCH_SOURCE, LAUNCHER_SOURCE

TOKEN_ENV = "TRAINYARD_ARTIFACT_TOKEN"  # noqa: S105 - the env name and Secret key, not a token
FETCH_CONTAINER_NAME = "fetch"
MODEL_VOLUME_NAME = "model"


def attempt_secret_name(spec: JobPodsSpec) -> str:
    """The attempt's Secret (data-store credentials and artifact token): the one `Cluster.launch` creates."""
    return spec.datastore_secret or names.datastore_secret_name(spec.job_id, spec.attempt)


def token_env(spec: JobPodsSpec) -> client.V1EnvVar:
    """TRAINYARD_ARTIFACT_TOKEN as a reference into the attempt's Secret, never a literal."""
    return client.V1EnvVar(
        name=TOKEN_ENV,
        value_from=client.V1EnvVarSource(
            secret_key_ref=client.V1SecretKeySelector(
                name=attempt_secret_name(spec), key=TOKEN_ENV, optional=False
            )
        ),
    )


def _secret_env(spec: JobPodsSpec, key: str) -> client.V1EnvVar:
    return client.V1EnvVar(
        name=key,
        value_from=client.V1EnvVarSource(
            secret_key_ref=client.V1SecretKeySelector(name=spec.datastore_secret, key=key, optional=False)
        ),
    )


def learner_artifact_env(artifacts: ArtifactSpec, index: int) -> dict[str, str]:
    """The literal artifact variables of learner `index` (MODEL_DIR, TRAINYARD_RESULTS_URL, and the
    TRAINYARD_TENSORBOARD_* ones when the job sends event files); a `{learner}` in a URL becomes the
    index, so each learner uploads under its own name."""
    env = {"MODEL_DIR": artifacts.model_dir}
    if artifacts.results_url:
        env["TRAINYARD_RESULTS_URL"] = artifacts.results_url.replace("{learner}", str(index))
    if artifacts.results_url and artifacts.tensorboard_url:
        env["TRAINYARD_TENSORBOARD_URL"] = artifacts.tensorboard_url.replace("{learner}", str(index))
        env["TRAINYARD_TENSORBOARD_DIR"] = artifacts.tensorboard_dir
        env["TRAINYARD_TENSORBOARD_INTERVAL"] = f"{artifacts.tensorboard_interval:g}"
    return env


def fetch_env(spec: JobPodsSpec) -> list[client.V1EnvVar]:
    """The init container's environment: what to fetch, the token, and only the S3 credentials it uses."""
    artifacts = spec.artifacts
    assert artifacts is not None
    literals = {"MODEL_DIR": artifacts.model_dir}
    if artifacts.code_url and artifacts.code_sha256:
        literals["TRAINYARD_CODE_URL"] = artifacts.code_url
        literals["TRAINYARD_CODE_SHA256"] = artifacts.code_sha256
        literals["TRAINYARD_CODE_MAX_UNPACKED"] = str(artifacts.code_max_unpacked)
    if artifacts.s3_fetch:
        literals["TRAINYARD_S3_FETCH"] = json.dumps([f.as_json() for f in artifacts.s3_fetch])
    env = [client.V1EnvVar(name=key, value=value) for key, value in literals.items()]
    env.append(token_env(spec))
    credential_keys = {
        key for f in artifacts.s3_fetch for key in (f.access_key_env, f.secret_key_env) if key is not None
    }
    env.extend(_secret_env(spec, key) for key in sorted(credential_keys))
    return env


def model_volume() -> client.V1Volume:
    """The emptyDir the code is unpacked into, shared by the init and the learner container."""
    return client.V1Volume(name=MODEL_VOLUME_NAME, empty_dir=client.V1EmptyDirVolumeSource())


def model_mount(artifacts: ArtifactSpec) -> client.V1VolumeMount:
    """Where the code folder is mounted (writable: training code may write next to itself)."""
    return client.V1VolumeMount(name=MODEL_VOLUME_NAME, mount_path=artifacts.model_dir)


def learner_command(spec: JobPodsSpec) -> list[str]:
    """The learner's argv: the user's, wrapped by the launcher when results are uploaded."""
    artifacts = spec.artifacts
    if artifacts is None or not artifacts.results_url:
        return list(spec.command)
    return [artifacts.python, "-c", LAUNCHER_SOURCE, *spec.command]


def _check_s3_targets(artifacts: ArtifactSpec, mounts: Sequence[client.V1VolumeMount]) -> None:
    writable = [m.mount_path.rstrip("/") for m in mounts if not m.read_only]
    for fetch in artifacts.s3_fetch:
        target = fetch.target.rstrip("/")
        if not any(target == path or target.startswith(f"{path}/") for path in writable):
            raise ValueError(f"S3 fetch target {fetch.target} is not inside a writable volume of the pod")


def make_fetch_container(
    spec: JobPodsSpec,
    mounts: Sequence[client.V1VolumeMount],
    security_context: client.V1SecurityContext,
) -> client.V1Container:
    """Build the `fetch` init container: `python -c FETCH_SOURCE` from the fetch image.

    It mounts what the learner mounts (so S3 targets land in the pod's volumes) and requests, as its
    limit too, the smaller of its own allowance and the learner's, keeping the pod's QoS and footprint.
    """
    artifacts = spec.artifacts
    assert artifacts is not None
    _check_s3_targets(artifacts, mounts)
    amounts = {
        "cpu": cpu_quantity(min(artifacts.fetch_cpu_millis, spec.cpu_millis)),
        "memory": memory_quantity(min(artifacts.fetch_memory_mib, spec.memory_mib)),
    }
    return client.V1Container(
        name=FETCH_CONTAINER_NAME,
        image=artifacts.fetch_image,
        command=[artifacts.python, "-c", FETCH_SOURCE],
        env=fetch_env(spec),
        resources=client.V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        volume_mounts=list(mounts),
        security_context=security_context,
        # Its one-line error becomes the terminated state's message, for the job's failure reason.
        termination_message_policy="FallbackToLogsOnError",
    )


def checkpoint_claim_labels(
    tenant_slug: str, job_id: names.JobId, learner: int | None = None
) -> dict[str, str]:
    """Labels of a job's checkpoint claim: the job's, without an attempt (it serves every attempt), and the
    learner's index on a claim of one learner's own."""
    labels = {**names.tenant_labels(tenant_slug), names.LABEL_JOB: names.label_value(job_id)}
    if learner is not None:
        labels[names.LABEL_LEARNER] = str(learner)
    return labels


def make_checkpoint_pvc(
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    storage_class: str | None,
    size: str,
    access_modes: Sequence[AccessMode] = ("ReadWriteOnce",),
) -> client.V1PersistentVolumeClaim:
    """Build the PersistentVolumeClaim that keeps a job's CHECKPOINT_DIR across attempts.

    `storage_class` None leaves the cluster's default class; `size` is a quantity ("10Gi"). Learners on
    several nodes that share one claim need a class that offers "ReadWriteMany" (StorageClasses do not say
    which modes they offer: a provisioner that lacks one leaves the claim Pending).
    """
    try:
        if parse_quantity(size) <= 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"checkpoint claim size must be a positive quantity, got {size!r}") from None
    if not access_modes:
        raise ValueError("a checkpoint claim needs at least one access mode")
    return client.V1PersistentVolumeClaim(
        api_version="v1",
        kind="PersistentVolumeClaim",
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, labels={**labels, names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=list(access_modes),
            storage_class_name=storage_class,
            resources=client.V1VolumeResourceRequirements(requests={"storage": size}),
        ),
    )


def make_job_checkpoint_pvcs(spec: JobPodsSpec) -> list[client.V1PersistentVolumeClaim]:
    """The checkpoint claims `Cluster.launch` creates for `spec` (needs `checkpoint_claim_size`): the one its
    learners share, or one per learner (labelled with the learner's index)."""
    if not spec.checkpoint_claims or not spec.checkpoint_claim_size:
        raise ValueError("the spec asks for no checkpoint claim to be created")
    size = spec.checkpoint_claim_size
    if spec.checkpoint_claim:
        owners: list[tuple[str, int | None]] = [(spec.checkpoint_claim, None)]
    else:
        owners = [(name, index) for index, name in enumerate(spec.checkpoint_learner_claims)]
    return [
        make_checkpoint_pvc(
            spec.namespace,
            name,
            checkpoint_claim_labels(spec.tenant, spec.job_id, learner),
            spec.checkpoint_storage_class,
            size,
            spec.checkpoint_access_modes,
        )
        for name, learner in owners
    ]
