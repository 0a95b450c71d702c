"""What a job's pods are made of: the clusterio `JobPodsSpec` of an attempt, from the job, its tenant and settings.

Pure translation, no cluster call: the spec a launch hands to clusterio (image, resources, env,
tolerations, checkpoint storage, artifacts, volumes), and the same build run at submit time to find
what a launch would refuse (`spec_problems`), so an accepted spec can run. Part of the door
(`jobs.cluster`), which re-exports every public name here.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from clusterio import names
from clusterio.builders import (
    ArtifactSpec,
    JobPodsSpec,
    RegistryLogin,
    S3Fetch,
    TenantLimits,
    VolumeSpec,
    datastore_env_name,
    datastore_secret_keys,
    make_headless_service,
    make_learner_pod,
    platform_mounts,
    reserved_env_reason,
)
from clusterio.taints import Taint, Toleration, learner_tolerations, parse_toleration, tolerates
from common.podoverrides import overrides_clean, overrides_tolerations
from jobs.core.gputypes import GpuTypes
from jobs.core.policy import full_image_name
from jobs.core.pools import is_potential, pool_of
from jobs.core.spec.labels import HYPERPARAMETERS_ENV, hyperparameter_env, hyperparameters_json
from jobs.credentials import Credentials, unseal
from jobs.models import Job, JobCredentials
from tenants.models import PodSecurity, Tenant
from tenants.policy import policy_of
from tenants.registries import registry_auth, registry_has_credentials
from tenants.secrets import datastore_credentials

# Learners rendezvous on a port of their own per job attempt, not torchrun's fixed 29500: where pods
# share a host network (kubesim: every pod is 127.0.0.1) two jobs on one port would collide (EADDRINUSE)
# or, worse, a learner would join another job's group. Below Linux's ephemeral range (32768+).
RENDEZVOUS_PORT_BASE = 29500
RENDEZVOUS_PORT_SPAN = 3000

_gpu_types: tuple[object, GpuTypes] | None = None


def gpu_types() -> GpuTypes:
    """The GPU type aliases of settings.GPU_TYPE_ALIASES, compiled once per value of the setting."""
    global _gpu_types
    source = settings.GPU_TYPE_ALIASES
    if _gpu_types is None or _gpu_types[0] is not source:
        _gpu_types = (source, GpuTypes(source))
    return _gpu_types[1]


def namespace_for(tenant: Tenant) -> str:
    """The Kubernetes namespace that holds a tenant's pods."""
    return names.tenant_namespace(settings.TENANT_NAMESPACE_PREFIX, tenant.slug)


def tenant_limits(tenant: Tenant) -> TenantLimits:
    """The tenant's quota as the namespace ResourceQuota enforces it (a safety net under admission): the most
    it may hold, borrowing included, and its claim storage and count."""
    quota = tenant.quota
    top = quota.ceiling()
    return TenantLimits(
        gpus=top.gpus,
        cpu_millis=top.cpu_millis,
        memory_mib=top.memory_mib,
        storage_gib=quota.storage_gib,
        max_claims=quota.max_claims,
    )


def rendezvous_port(job: Job) -> int:
    """The MASTER_PORT of the job's current attempt: deterministic, so a retried launch builds the same pods."""
    digest = zlib.crc32(f"{job.pk}/{job.attempt}".encode())
    return RENDEZVOUS_PORT_BASE + digest % RENDEZVOUS_PORT_SPAN


def credential_problems(credentials: Credentials) -> list[str]:
    """Why these data-store credentials cannot become one Secret (two map to one key, or a reserved name)."""
    try:
        datastore_secret_keys(credentials)
    except ValueError as exc:
        return [str(exc)]
    return []


def spec_problems(*, tenant: Tenant, spec: dict[str, Any], credentials: Credentials) -> dict[str, list[str]]:
    """What the pod builder would refuse in a validated spec, as field errors: the same pods a launch
    builds, so that a spec accepted at submit can run (user volumes on the platform's own mount points,
    env names the platform sets, anything else the builder refuses)."""
    resources = spec["resources"]
    job = Job(
        id="submit-check",
        tenant=tenant,
        spec=spec,
        attempt=1,
        learners=spec["learners"],
        gpus=resources["gpus"],
        cpu_millis=resources["cpu_millis"],
        memory_mib=resources["memory_mib"],
    )
    errors: dict[str, list[str]] = {}
    pods = pods_spec(job, credentials, pull_secret=False)
    # The checkpoint mount is measured against the platform's others apart (on one of them it would make the
    # pod builder itself refuse), and with the code folder always counted: whether a job carries code
    # depends on the installation (ARTIFACTS_BASE_URL), and a spec must not be fine on one and not another.
    probe = dataclasses.replace(
        pods, checkpoint_dir=_PROBE_CHECKPOINT_DIR, artifacts=pods.artifacts or ArtifactSpec()
    )
    taken = platform_mounts(probe)
    checkpoint_owner = taken.pop(pods.checkpoint_dir.rstrip("/") or "/", None)
    if checkpoint_owner is not None:
        errors["checkpoint_dir"] = [
            f"{pods.checkpoint_dir} is where the platform mounts "
            f"{_MOUNT_NAMES.get(checkpoint_owner, checkpoint_owner)}; choose another folder"
        ]
    taken.pop(_PROBE_CHECKPOINT_DIR, None)
    taken[pods.checkpoint_dir.rstrip("/") or "/"] = "checkpoint"
    for i, volume in enumerate(spec.get("volumes", [])):
        owner = taken.get(volume["mount_path"].rstrip("/") or "/")
        if owner is not None:
            errors[f"volumes[{i}].mount_path"] = [
                f"{volume['mount_path']} is where the platform mounts {_MOUNT_NAMES.get(owner, owner)}; "
                "mount the volume elsewhere"
            ]
    for name in spec.get("env", {}):
        reason = reserved_env_reason(name, pods.threads)
        if reason is not None:
            errors[f"env.{name}"] = [f"{name} cannot be set in a spec: {reason}"]
    if not errors:
        try:
            for index in range(pods.learners):
                make_learner_pod(pods, index)
            make_headless_service(pods)
        except ValueError as exc:
            errors["spec"] = [f"cannot be run: {exc}"]
    return errors


_PROBE_CHECKPOINT_DIR = "/.trainyard-checkpoint-probe"
_MOUNT_NAMES = {
    "scratch": "the learner's scratch space (TRAINYARD_SCRATCH_DIR)",
    "dshm": "shared memory",
    "checkpoint": "CHECKPOINT_DIR",
    "model": "the job's code (MODEL_DIR)",
}


def job_inline_credentials(job: Job) -> Credentials:
    """The credentials the job brought itself (an FfDL manifest's), unsealed ({} when it has none): what a
    retry carries over."""
    row = JobCredentials.objects.filter(job=job).first()
    return unseal(row.sealed) if row is not None else {}


def job_credentials(job: Job) -> Credentials:
    """Every data-store credential a launch of the job needs, unsealed: its own, and the values its tenant's
    data-store secrets named in `volumes[].secret` hold now (so a rotation applies to the next launch).
    Raises tenants.secrets.MissingSecret (a ValueError: the launch fails the job) for a secret deleted since."""
    inline = job_inline_credentials(job)
    named = {
        v["secret"] for v in job.spec.get("volumes", []) if v.get("secret") and v["secret"] not in inline
    }
    return inline | datastore_credentials(tenant=job.tenant, names=named)


def image_host(job: Job) -> str:
    """The registry host of the job's image, as the container runtime reads it (`python:3.11`: docker.io)."""
    return full_image_name(job.spec["image"]).partition("/")[0]


def job_registry_login(job: Job) -> RegistryLogin | None:
    """The tenant's pull credentials for the registry of the job's image, opened for a launch (None: the
    tenant has none for that host, and the pods pull without)."""
    auth = registry_auth(tenant=job.tenant, host=image_host(job))
    if auth is None:
        return None
    return RegistryLogin(host=auth.host, username=auth.username, password=auth.password)


def pods_spec(
    job: Job,
    credentials: Credentials | None = None,
    gpu_products: list[str] | None = None,
    *,
    pull_secret: bool | None = None,
) -> JobPodsSpec:
    """Everything clusterio needs to build the pods of the job's current attempt.

    The pods reference the attempt's data-store Secret by key, never the values (`credentials`, read from
    the database when not given, only decides which keys there are). `gpu_products` are the cluster's
    product labels that the spec's `gpu_type` matches (see `launch`). `pull_secret` says whether the pods
    name the attempt's image pull Secret (None: when the tenant has credentials for the image's registry).
    """
    spec: dict[str, Any] = job.spec
    if credentials is None:
        credentials = job_credentials(job)
    if pull_secret is None:
        pull_secret = registry_has_credentials(tenant=job.tenant, host=image_host(job))
    volumes = [_volume(v) for v in spec.get("volumes", [])]
    data = next((v["mount_path"] for v in spec.get("volumes", []) if v["kind"] == "data"), "/data")
    results = next((v["mount_path"] for v in spec.get("volumes", []) if v["kind"] == "results"), "/results")
    tuning = spec.get("tuning") or {}
    return JobPodsSpec(
        job_id=job.pk,
        attempt=job.attempt,
        tenant=job.tenant.slug,
        namespace=namespace_for(job.tenant),
        image=spec["image"],
        command=list(spec["command"]),
        learners=job.learners,
        gpus=job.gpus,
        cpu_millis=job.cpu_millis,
        memory_mib=job.memory_mib,
        gpu_type=spec["resources"].get("gpu_type"),
        gpu_products=tuple(gpu_products or ()),
        env=dict(spec.get("env", {})),
        volumes=volumes,
        checkpoint_dir=spec["checkpoint_dir"],
        data_dir=data,
        result_dir=results,
        threads=tuning.get("threads", "auto"),
        active_deadline_seconds=_active_deadline(spec.get("max_runtime_seconds")),
        master_port=rendezvous_port(job),
        datastore_secret=names.datastore_secret_name(job.pk, job.attempt) if credentials else None,
        datastore_keys=datastore_secret_keys(credentials),
        image_pull_secret=names.pull_secret_name(job.pk, job.attempt) if pull_secret else None,
        artifacts=_artifacts(job, spec, credentials),
        node_lost_toleration_seconds=settings.NODE_LOST_GRACE_SECONDS,
        termination_grace_seconds=settings.LEARNER_TERMINATION_GRACE_SECONDS,
        run_as_user=settings.POD_RUN_AS_USER,
        gpu_tolerations=gpu_tolerations(),
        node_names=_node_names(job),
        node_pool=_node_pool(job),
        platform_env=_hyperparameter_env(spec),
        pod_overrides=pod_overrides(job.tenant),
        **_checkpoints(job),
    )


def _active_deadline(runtime: int | None) -> int | None:
    """The pods' activeDeadlineSeconds for a job's max_runtime: the platform stops the job itself at its
    max_runtime with a halt's grace (the launcher uploads RESULT_DIR meanwhile), so the kubelet's deadline is
    only a backstop for when it cannot, set past that grace by MAX_RUNTIME_BACKSTOP_SECONDS."""
    if not runtime:
        return None
    return int(runtime) + settings.LEARNER_TERMINATION_GRACE_SECONDS + settings.MAX_RUNTIME_BACKSTOP_SECONDS


def _hyperparameter_env(spec: dict[str, Any]) -> dict[str, str]:
    """The job's hyperparameters as its command reads them: `HP_<NAME>` each and TRAINYARD_HYPERPARAMETERS
    (JSON) for all (jobs/core/spec/labels.py); nothing for a job without any (or submitted before them)."""
    hyperparameters = spec.get("hyperparameters") or {}
    if not hyperparameters:
        return {}
    return hyperparameter_env(hyperparameters) | {HYPERPARAMETERS_ENV: hyperparameters_json(hyperparameters)}


def _node_names(job: Job) -> tuple[str, ...] | None:
    """The nodes admission chose for the current attempt's learners, one each (a launch retried for the same
    attempt binds to the same nodes; a requeued job is admitted afresh); None when the job has no full
    placement or was placed on nodes a pool has yet to add (`jobs.core.pools`): then the kube-scheduler
    chooses, and the pods it cannot place yet are what the cluster autoscaler grows the pool for."""
    placements = tuple(job.placements or ())
    if len(placements) != job.learners or not all(isinstance(n, str) and n for n in placements):
        return None
    if any(is_potential(n) for n in placements):
        return None
    return placements


def _node_pool(job: Job) -> tuple[str, str] | None:
    """(NODE_POOL_LABEL, pool) when every learner was placed on nodes one pool has yet to add and pools are
    told by that label: the pods then wait for that pool's nodes, not any node with room. None otherwise."""
    placements = tuple(job.placements or ())
    if not settings.NODE_POOL_LABEL or not placements or not all(is_potential(n) for n in placements):
        return None
    pools = {pool_of(n) for n in placements}
    return (settings.NODE_POOL_LABEL, pools.pop()) if len(pools) == 1 else None


@functools.cache
def _parsed_tolerations(texts: tuple[str, ...]) -> tuple[Toleration, ...]:
    return tuple(parse_toleration(text) for text in texts if text.strip())


def gpu_tolerations() -> tuple[Toleration, ...]:
    """GPU_TOLERATIONS: what learners that ask for GPUs tolerate (raises ValueError when misspelt)."""
    return _parsed_tolerations(tuple(settings.GPU_TOLERATIONS))


def tolerated_taints(
    *, gpus: int, taints: Iterable[Taint], overrides: tuple[dict[str, Any], ...] = ()
) -> frozenset[Taint]:
    """The taints among `taints` that a learner asking for `gpus` GPUs tolerates: the pods' own tolerations
    (`pods_spec`) and those the operator's `overrides` add (`pod_overrides`), so admission never places a
    learner where the kube-scheduler would refuse it, and places it where an operator lets it go."""
    tolerations = learner_tolerations(
        gpus=gpus, gpu_tolerations=gpu_tolerations(), node_lost_seconds=settings.NODE_LOST_GRACE_SECONDS
    ) + tuple(_toleration(t) for t in overrides_tolerations(*overrides))
    return frozenset(t for t in taints if tolerates(tolerations, t))


def _toleration(body: dict[str, Any]) -> Toleration:
    return Toleration(
        key=body.get("key", ""),
        operator=body["operator"],
        value=body.get("value", ""),
        effect=body.get("effect", ""),
        toleration_seconds=body.get("tolerationSeconds"),
    )


_global_overrides: tuple[object, dict[str, Any]] | None = None


def global_pod_overrides() -> dict[str, Any]:
    """POD_OVERRIDES, checked (settings check it as they load; a test's override is checked here, once per
    value). Raises common.podoverrides.OverridesError."""
    global _global_overrides
    source = settings.POD_OVERRIDES
    if _global_overrides is None or _global_overrides[0] is not source:
        _global_overrides = (source, overrides_clean(source))
    return _global_overrides[1]


def pod_overrides(tenant: Tenant) -> tuple[dict[str, Any], ...]:
    """The operator overrides of the tenant's learner pods, in the order they apply (`overrides_in_order`),
    checked again (a row written past the policy's checks fails the launch, as InvalidSpec, with the reason:
    common.podoverrides.OverridesError is a ValueError)."""
    return overrides_in_order(overrides_clean(policy_of(tenant).pod_overrides))


def overrides_in_order(tenant_overrides: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """POD_OVERRIDES, then a tenant policy's `pod_overrides` (checked when saved); empty ones left out."""
    return tuple(doc for doc in (global_pod_overrides(), tenant_overrides) if doc)


def _checkpoints(job: Job) -> dict[str, Any]:
    """Where CHECKPOINT_DIR lives so that a requeued attempt resumes: a node folder where configured
    (single-node clusters), else claims of CHECKPOINT_CLAIM_SIZE kept until the job is deleted, else the
    pod's scratch space (CHECKPOINT_CLAIM_SIZE empty: nothing outlives a pod).

    With CHECKPOINT_ACCESS_MODE ReadWriteOnce (the default, what every class offers) each learner has a
    claim of its own and mounts it on every attempt, so learner i resumes from what learner i wrote (DDP
    training broadcasts rank 0's state on resume); with ReadWriteMany the learners share one claim."""
    if settings.CHECKPOINT_HOST_ROOT:
        return {
            "checkpoint_host_path": f"{settings.CHECKPOINT_HOST_ROOT.rstrip('/')}/{job.tenant.slug}/{job.pk}"
        }
    if not settings.CHECKPOINT_CLAIM_SIZE:
        return {}
    claims: dict[str, Any] = {
        "checkpoint_claim_size": settings.CHECKPOINT_CLAIM_SIZE,
        "checkpoint_storage_class": settings.CHECKPOINT_STORAGE_CLASS or None,
        "checkpoint_access_modes": (settings.CHECKPOINT_ACCESS_MODE,),
    }
    if settings.CHECKPOINT_ACCESS_MODE == "ReadWriteMany":
        return {**claims, "checkpoint_claim": names.checkpoint_claim_name(job.pk)}
    learner_claims = tuple(names.checkpoint_claim_name(job.pk, index) for index in range(job.learners))
    return {**claims, "checkpoint_learner_claims": learner_claims}


def pod_security_problem(*, tenant: Tenant, level: str) -> str | None:
    """Why the tenant's learner pods cannot pass the Pod Security `level` its namespace enforces with this
    installation's settings (None when they can): a checkpoint folder on the node (CHECKPOINT_HOST_ROOT) is a
    hostPath volume, which baseline and restricted refuse, so every launch would be refused."""
    if settings.CHECKPOINT_HOST_ROOT and level != PodSecurity.PRIVILEGED:
        return (
            f"this installation keeps checkpoints in a folder on the node (CHECKPOINT_HOST_ROOT), a hostPath "
            f"volume that only the privileged Pod Security level admits, and tenant {tenant.slug}'s policy "
            f"enforces {level}; a platform admin can set its pod_security to privileged"
        )
    return None


def _artifacts(job: Job, spec: dict[str, Any], credentials: Credentials) -> ArtifactSpec | None:
    """What the pods fetch and upload (docs/artifacts.md): the code ZIP, S3 data volumes, and results —
    when pods can reach the platform (ARTIFACTS_BASE_URL) or, without it, S3 data alone."""
    base = settings.ARTIFACTS_BASE_URL.rstrip("/")
    fetches = tuple(
        _s3_fetch(volume, credentials)
        for volume in spec.get("volumes", [])
        if volume["type"] == "s3" and volume["kind"] == "data"
    )
    if not base and not fetches:
        return None
    prefix = f"{base}/api/v1/artifacts/{job.pk}/{job.attempt}"
    code = job.code if base else None
    metrics = spec.get("evaluation_metrics") or {}
    tensorboard = bool(base) and metrics.get("type") == "tensorboard"
    return ArtifactSpec(
        code_url=f"{prefix}/code" if code is not None else None,
        code_sha256=code.sha256 if code is not None else None,
        results_url=f"{prefix}/{{learner}}/results" if base else None,
        fetch_image=settings.ARTIFACT_FETCH_IMAGE,
        s3_fetch=fetches,
        code_max_unpacked=settings.CODE_MAX_UNPACKED_BYTES,
        tensorboard_url=f"{prefix}/{{learner}}/tensorboard" if tensorboard else None,
        tensorboard_dir=metrics.get("in") or "" if tensorboard else "",
        tensorboard_interval=settings.TENSORBOARD_SYNC_SECONDS,
    )


def _s3_fetch(volume: dict[str, Any], credentials: Credentials) -> S3Fetch:
    store = volume.get("secret")
    keys = credentials.get(store or "", {})
    with_keys = "access_key_id" in keys and "secret_access_key" in keys
    return S3Fetch(
        bucket=volume["bucket"],
        target=volume["mount_path"],
        prefix=volume.get("prefix") or "",
        endpoint=volume.get("endpoint") or keys.get("endpoint") or None,
        region=keys.get("region") or None,
        access_key_env=datastore_env_name(store, "access_key_id") if with_keys and store else None,
        secret_key_env=datastore_env_name(store, "secret_access_key") if with_keys and store else None,
    )


def _volume(volume: dict[str, Any]) -> VolumeSpec:
    return VolumeSpec(
        name=volume["name"],
        kind=volume["type"],
        mount_path=volume["mount_path"],
        read_only=volume.get("read_only", False),
        host_path=volume.get("path"),
        claim_name=volume.get("claim"),
        bucket=volume.get("bucket"),
    )
