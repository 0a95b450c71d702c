"""The one door from jobs to Kubernetes: turns jobs and tenants into clusterio inputs and calls clusterio.

Everything the platform asks of a cluster passes through the functions here, so the whole Kubernetes
surface of the jobs app can be read in one place.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

from django.conf import settings

from clusterio import names, telemetry
from clusterio.builders import JobPodsSpec, TenantLimits, VolumeSpec, datastore_secret_keys
from clusterio.client import Cluster, NodeInfo
from clusterio.telemetry import PodUsage
from jobs.credentials import Credentials, unseal
from jobs.models import Job, JobCredentials
from tenants.models import Tenant

_local = threading.local()
# Learners rendezvous on a port of their own per job attempt, not torchrun's fixed 29500: where pods
# share a host network (kubesim: every pod is 127.0.0.1) two jobs on one port would collide (EADDRINUSE)
# or, worse, a learner would join another job's group. Below Linux's ephemeral range (32768+).
RENDEZVOUS_PORT_BASE = 29500
RENDEZVOUS_PORT_SPAN = 3000


def cluster() -> Cluster:
    """This thread's client for the configured cluster (kubeconfig from settings, else in-cluster)."""
    client: Cluster | None = getattr(_local, "cluster", None)
    config = (settings.KUBECONFIG, settings.KUBE_CONTEXT)
    if client is None or getattr(_local, "config", None) != config:
        client = Cluster(kubeconfig=settings.KUBECONFIG or None, context=settings.KUBE_CONTEXT or None)
        _local.cluster, _local.config = client, config
    return client


def namespace_for(tenant: Tenant) -> str:
    """The Kubernetes namespace that holds a tenant's pods."""
    return names.tenant_namespace(settings.TENANT_NAMESPACE_PREFIX, tenant.slug)


def tenant_limits(tenant: Tenant) -> TenantLimits:
    """The tenant's quota as the namespace ResourceQuota enforces it (a safety net under admission)."""
    quota = tenant.quota
    return TenantLimits(gpus=quota.gpus, cpu_millis=quota.cpu_millis, memory_mib=quota.memory_mib)


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


def job_credentials(job: Job) -> Credentials:
    """The job's data-store credentials, unsealed ({} when it has none)."""
    row = JobCredentials.objects.filter(job=job).first()
    return unseal(row.sealed) if row is not None else {}


def pods_spec(job: Job, credentials: Credentials | None = None) -> JobPodsSpec:
    """Everything clusterio needs to build the pods of the job's current attempt.

    The pods reference the attempt's data-store Secret by key, never the values (`credentials`, read from
    the database when not given, only decides which keys there are).
    """
    spec: dict[str, Any] = job.spec
    if credentials is None:
        credentials = job_credentials(job)
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
        env=dict(spec.get("env", {})),
        volumes=volumes,
        checkpoint_dir=spec["checkpoint_dir"],
        data_dir=data,
        result_dir=results,
        threads=tuning.get("threads", "auto"),
        max_runtime_seconds=spec.get("max_runtime_seconds"),
        master_port=rendezvous_port(job),
        checkpoint_host_path=_checkpoint_host_path(job),
        datastore_secret=names.datastore_secret_name(job.pk, job.attempt) if credentials else None,
        datastore_keys=datastore_secret_keys(credentials),
    )


def _checkpoint_host_path(job: Job) -> str | None:
    root = settings.CHECKPOINT_HOST_ROOT
    if not root:
        return None
    return f"{root.rstrip('/')}/{job.tenant.slug}/{job.pk}"


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


def launch(job: Job) -> list[str]:
    """Create (or adopt) the tenant's namespace objects, the attempt's data-store Secret and the job's pods;
    returns the pod names."""
    client = cluster()
    client.ensure_tenant(
        namespace=namespace_for(job.tenant),
        tenant_slug=job.tenant.slug,
        limits=tenant_limits(job.tenant),
        labels=settings.TENANT_NAMESPACE_LABELS,
    )
    credentials = job_credentials(job)
    return client.launch(spec=pods_spec(job, credentials), credentials=credentials or None)


def teardown(job: Job, attempt: int | None = None) -> int:
    """Delete the job's pods and services (of one attempt, or all of them)."""
    return cluster().teardown(namespace=namespace_for(job.tenant), job_id=job.pk, attempt=attempt)


def delete_pod(pod: dict[str, Any]) -> bool:
    """Delete one pod, as listed (True when this call deleted it; False when it was gone or going)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    return cluster().delete_pod(namespace=meta["namespace"], pod=meta["name"])


def job_pods(job: Job) -> list[dict[str, Any]]:
    """The pods of the job's current attempt, as the API returns them."""
    return cluster().job_pods(namespace=namespace_for(job.tenant), job_id=job.pk, attempt=job.attempt)


def log_tail(job: Job, index: int, lines: int = 20) -> list[str]:
    """The last lines a learner of the current attempt printed ([] when its pod is gone)."""
    pod = names.learner_pod_name(job.pk, job.attempt, index)
    return cluster().pod_log_tail(namespace=namespace_for(job.tenant), pod=pod, lines=lines)


def nodes() -> list[NodeInfo]:
    """The cluster's nodes with their free capacity, for admission."""
    return cluster().nodes()


def pod_owner(pod: dict[str, Any]) -> tuple[str, int] | None:
    """The (job id, attempt) a managed pod belongs to, from its labels (None if not one of ours)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return labels[names.LABEL_JOB], int(labels[names.LABEL_ATTEMPT])
    except (KeyError, ValueError):
        return None


def pod_learner(pod: dict[str, Any]) -> int | None:
    """The learner index of a managed pod, from its labels."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return int(labels[names.LABEL_LEARNER])
    except (KeyError, ValueError):
        return None


def learner_usage(job: Job) -> dict[int, PodUsage | None]:
    """CPU, memory (and GPU, where exposed) each learner of the current attempt uses, from metrics.k8s.io."""
    return telemetry.learner_usage(
        cluster(),
        namespace=namespace_for(job.tenant),
        job_id=job.pk,
        attempt=job.attempt,
        learners=job.learners,
    )
