"""The one door from jobs to Kubernetes: turns jobs and tenants into clusterio inputs and calls clusterio.

Everything the platform asks of a cluster passes through the functions here, so the whole Kubernetes
surface of the jobs app can be read in one place: the calls (the client, launch, teardown, claims, reads)
in this module, what a job's pods are made of in `jobs.cluster.podspec`, re-exported here. Every function
that talks to the cluster lives in this module and gets its client from `cluster()` at call time, so one
replacement of `jobs.cluster.cluster` (tests, a recorder) reaches them all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections

from clusterio import gpumetrics, names, telemetry
from clusterio.client import Cluster, ManagedKind, NodeInfo
from clusterio.errors import (
    ClusterError,
    Conflict,
    Forbidden,
    Invalid,
    NamespaceNotOwned,
    PriorityClassMissing,
    QuotaExceeded,
    Unavailable,
)
from clusterio.logs import LogCursor, LogFollower, LogRecord
from clusterio.nodecache import NodeCache
from clusterio.reflector import PodReflector
from clusterio.telemetry import PodUsage
from jobs.artifacts.tokens import mint_token
from jobs.cluster import leftovers, nodesummary, podsummary
from jobs.cluster import pools as _pools
from jobs.cluster.podspec import (
    RENDEZVOUS_PORT_BASE,
    RENDEZVOUS_PORT_SPAN,
    credential_problems,
    global_pod_overrides,
    gpu_tolerations,
    gpu_types,
    image_host,
    job_credentials,
    job_inline_credentials,
    job_registry_login,
    namespace_for,
    overrides_in_order,
    pod_overrides,
    pod_security_problem,
    pods_spec,
    rendezvous_port,
    spec_problems,
    tenant_limits,
    tolerated_taints,
)
from jobs.cluster.pools import node_pools
from jobs.core.pools import is_potential, pool_of
from jobs.models import Job
from tenants.policy import policy_of

# What the rest of the jobs app (and the pages above it) uses of clusterio, taken from here: this package is
# the one door to the cluster, so everything Kubernetes the app touches is visible in one place. The pod
# spec's names are listed too: they are this door's, defined in `jobs.cluster.podspec`.
__all__ = [
    "RENDEZVOUS_PORT_BASE",
    "RENDEZVOUS_PORT_SPAN",
    "Cluster",
    "ClusterError",
    "Conflict",
    "Forbidden",
    "Invalid",
    "LogCursor",
    "LogFollower",
    "LogRecord",
    "NamespaceNotOwned",
    "NodeCache",
    "NodeInfo",
    "PodReflector",
    "PriorityClassMissing",
    "ProvisioningFailed",
    "ProvisioningPending",
    "QuotaExceeded",
    "Unavailable",
    "credential_problems",
    "global_pod_overrides",
    "gpu_tolerations",
    "gpu_types",
    "image_host",
    "job_credentials",
    "job_inline_credentials",
    "job_registry_login",
    "namespace_for",
    "node_pools",
    "overrides_in_order",
    "pod_overrides",
    "pod_security_problem",
    "pods_spec",
    "potential_pool_nodes",
    "rendezvous_port",
    "spec_problems",
    "tenant_limits",
    "tolerated_taints",
]

log = logging.getLogger(__name__)
_local = threading.local()


def cluster() -> Cluster:
    """This thread's client for the configured cluster (kubeconfig from settings, else in-cluster), scoped
    to this installation's objects."""
    client: Cluster | None = getattr(_local, "cluster", None)
    config = (settings.KUBECONFIG, settings.KUBE_CONTEXT, installation_id(), settings.NODE_POOL_LABEL)
    if client is None or getattr(_local, "config", None) != config:
        client = Cluster(
            kubeconfig=settings.KUBECONFIG or None,
            context=settings.KUBE_CONTEXT or None,
            installation=config[2],
            pool_label=settings.NODE_POOL_LABEL,
        )
        _local.cluster, _local.config = client, config
    return client


@functools.cache
def _database_installation_id(alias: str, name: str) -> str:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT system_identifier FROM pg_control_system()")
        system = cursor.fetchone()[0]
    return f"db-{names.short_hash(f'{system}/{name}')}"


def installation_id() -> str:
    """The label value that marks this installation's objects: INSTALLATION_ID, else derived from the
    database (its server's system identifier and its name), so every process of one installation agrees
    and a staging copy on another database differs."""
    if settings.INSTALLATION_ID:
        return str(settings.INSTALLATION_ID)
    return _database_installation_id("default", str(connections["default"].settings_dict["NAME"]))


def gpu_products() -> list[str]:
    """The GPU product labels the cluster's nodes carry (the watcher's summary, else one list of nodes), and
    those of the NODE_POOLS that can grow (their nodes carry it once they are added, none may be there now)."""
    cached = nodesummary.read(installation_id())
    present = cluster().gpu_products() if cached is None else [n.gpu_type for n in cached if n.gpu_type]
    return sorted(set(present) | {pool.gpu_type for pool in node_pools() if pool.gpu_type})


def potential_pool_nodes(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes NODE_POOLS may still add beyond `nodes` (`jobs.cluster.pools`); pools that name a node group
    take its sizes from the cluster autoscaler's status (declared sizes when the cluster cannot say)."""
    client = None
    if any(pool.node_group for pool in node_pools()):
        try:
            client = cluster()
        except ClusterError as exc:
            log.warning("no cluster to read node group sizes from (%s)", exc)
    return _pools.potential_pool_nodes(nodes, client)


def launch(job: Job) -> list[str]:
    """Create (or adopt) the tenant's namespace objects, the attempt's data-store Secret, its image pull Secret
    (when the tenant has credentials for the image's registry) and the job's pods; returns the pod names. A job
    with a GPU type gets the product labels it matches on the nodes now."""
    client = cluster()
    client.ensure_tenant(
        namespace=namespace_for(job.tenant),
        tenant_slug=job.tenant.slug,
        limits=tenant_limits(job.tenant),
        labels=settings.TENANT_NAMESPACE_LABELS,
        egress_cidrs=settings.TENANT_EGRESS_CIDRS,
        dns_cidrs=settings.NODE_LOCAL_DNS_CIDRS,
        pod_security=policy_of(job.tenant).pod_security,  # type: ignore[arg-type]
    )
    credentials = job_credentials(job)
    # An alias (`A100`) is no label value: the pods require one of the product labels of the cluster's
    # nodes that it stands for now, so the kube-scheduler enforces the type (on a node added later with a
    # new product label, a later attempt may run too).
    gpu_type = job.spec["resources"].get("gpu_type")
    products = gpu_types().matching(gpu_type, gpu_products()) if gpu_type else []
    login = job_registry_login(job)
    spec = pods_spec(job, credentials, products, pull_secret=login is not None)
    # Before anything of the attempt exists: reconcile then knows where to look should its teardown fail.
    leftovers.remember_attempt(installation_id(), job.pk, job.attempt, spec.namespace)
    request = _provisioned(client, job, spec)
    token = mint_token(job_id=job.pk, attempt=job.attempt) if spec.artifacts is not None else None
    return client.launch(
        spec=spec,
        credentials=credentials or None,
        artifact_token=token,
        provisioning_request=request,
        registry_login=login,
    )


class ProvisioningPending(Exception):
    """The gang's ProvisioningRequest is not provisioned yet: the launch waits (its words are the wait reason)."""


class ProvisioningFailed(Exception):
    """The cluster autoscaler gave up on the gang's ProvisioningRequest (Failed, CapacityRevoked, or
    BookingExpired before its pods were created): the job goes back to the queue."""


def _provisioned(client: Cluster, job: Job, spec: Any) -> str | None:
    """For a gang placed on nodes a pool has yet to add (`jobs.core.pools`), on a cluster that serves
    ProvisioningRequests: the request its pods consume once it is provisioned (ProvisioningPending before,
    ProvisioningFailed when refused). None when no request is needed: the pods go pending as they are."""
    potential = [n for n in job.placements or () if is_potential(n)]
    if not potential or not client.serves_provisioning_requests():
        return None
    state = client.provision(spec=spec, valid_until_seconds=settings.PROVISIONING_TIMEOUT_SECONDS)
    if state.failed:
        raise ProvisioningFailed(
            f"the cluster autoscaler could not provision the job's nodes ({state.failed})"
        )
    if not state.provisioned:
        pools = sorted({pool_of(n) for n in potential})
        said = f" (cluster autoscaler: {state.waiting})" if state.waiting else ""
        raise ProvisioningPending(
            f"waiting for {len(set(potential))} node(s) of pool {', '.join(pools)} to be provisioned{said}"
        )
    return state.name


def tenant_namespace(tenant_slug: str) -> str:
    """The namespace of the tenant with this slug, as `namespace_for` names it now."""
    return names.tenant_namespace(settings.TENANT_NAMESPACE_PREFIX, tenant_slug)


def ownership_labels(tenant_slug: str) -> dict[str, str]:
    """The labels that make a tenant's namespace this installation's (what an operator sets on purpose);
    the same as `Cluster.ownership_labels`, without a connection (the admin's page shows them)."""
    return {
        **names.tenant_labels(tenant_slug),
        names.LABEL_INSTALLATION: names.label_value(installation_id()),
    }


def ownership_command(namespace: str, tenant_slug: str) -> str:
    """The kubectl command that hands `namespace` over to this installation for the tenant, on purpose."""
    labels = " ".join(f"{key}={value}" for key, value in ownership_labels(tenant_slug).items())
    return f"kubectl label namespace {namespace} {labels} --overwrite"


def namespace_owned(namespace: str, tenant_slug: str) -> bool:
    """Whether the tenant's namespace is free to create or already this installation's."""
    return cluster().namespace_owned(namespace=namespace, tenant_slug=tenant_slug)


def priority_class_exists(name: str) -> bool:
    """Whether the cluster has the PriorityClass `name` (what a job held on a missing one waits for)."""
    return cluster().priority_class_exists(name)


def quota_fingerprint(namespace: str, name: str) -> str:
    """What one ResourceQuota of the namespace says now (its limits and what it counts as used), as a short
    hash: a different hash later means it may admit what it refused. "" when the quota is gone."""
    for quota in cluster().namespace_quotas(namespace):
        if quota["metadata"]["name"] == name:
            said = {
                "hard": (quota.get("spec") or {}).get("hard"),
                "used": (quota.get("status") or {}).get("used"),
            }
            return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()[:16]
    return ""


def delete_checkpoints(job: Job) -> int:
    """Delete the job's checkpoint claims (with the job: attempts share them), found by the job's label so
    that the shared and the per-learner layouts both go; returns how many were deleted."""
    if settings.CHECKPOINT_HOST_ROOT or not settings.CHECKPOINT_CLAIM_SIZE:
        return 0
    deleted = cluster().delete_checkpoint_claims(namespace=namespace_for(job.tenant), job_id=job.pk)
    leftovers.forget_claims(installation_id(), job_id=job.pk)
    return deleted


def teardown(job: Job, attempt: int | None = None) -> int:
    """Delete the job's pods and services (of one attempt, or all of them)."""
    deleted = cluster().teardown(namespace=namespace_for(job.tenant), job_id=job.pk, attempt=attempt)
    leftovers.forget_attempts(installation_id(), job.pk, attempt)
    return deleted


def leftover_attempts() -> dict[tuple[str, int], str]:
    """(job id, attempt) -> namespace of every attempt that still has a Service or Secret."""
    found: dict[tuple[str, int], str] = {}
    kinds: tuple[ManagedKind, ...] = ("services", "secrets")
    for kind in kinds:
        for obj in cluster().managed_objects(kind):
            key = pod_owner(obj)
            if key is not None:
                found[key] = obj["metadata"]["namespace"]
    return found


def teardown_in(namespace: str, job_id: str, attempt: int) -> int:
    """Delete one attempt's pods, Services and Secrets by namespace (its job row may be gone)."""
    deleted = cluster().teardown(namespace=namespace, job_id=job_id, attempt=attempt)
    leftovers.forget_attempts(installation_id(), job_id, attempt)
    return deleted


def checkpoint_claims() -> list[tuple[str, str, str]]:
    """(namespace, name, job id) of every checkpoint claim of this installation not already going."""
    found = []
    for claim in cluster().managed_objects("persistentvolumeclaims"):
        meta = claim["metadata"]
        if not meta.get("deletionTimestamp"):
            found.append(
                (meta["namespace"], meta["name"], (meta.get("labels") or {}).get(names.LABEL_JOB, ""))
            )
    return found


def delete_claim(namespace: str, name: str) -> bool:
    """Delete one checkpoint claim (of a job that no longer exists)."""
    deleted = cluster().delete_checkpoint_claim(namespace=namespace, name=name)
    leftovers.forget_claims(installation_id(), claims=[(namespace, name)])
    return deleted


def copied_leftovers() -> tuple[dict[tuple[str, int], str], list[tuple[str, str, str]]]:
    """Reconcile's copy of the attempts that may have Services or Secrets and of the checkpoint claims
    (`leftovers`), read between resyncs instead of listing them."""
    return leftovers.read(installation_id())


def resynced_leftovers(
    attempts: dict[tuple[str, int], str], claims: list[tuple[str, str, str]], started: float
) -> None:
    """Replace reconcile's copy with what a resync listed from `started` on."""
    leftovers.resynced(installation_id(), attempts, claims, started)


def unbound_claims(pod: dict[str, Any]) -> list[str]:
    """What is wrong with the claims a pending pod mounts, one phrase per claim that is missing or not
    Bound (its phase, access modes and class: a class that lacks a mode leaves the claim Pending, and
    StorageClasses do not say which modes they offer); [] when all are bound or the cluster cannot say."""
    namespace = pod["metadata"]["namespace"]
    found = []
    try:
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not name:
                continue
            claim = cluster().get_claim(namespace=namespace, name=name)
            if claim is None:
                found.append(f"claim {name} does not exist")
                continue
            phase = (claim.get("status") or {}).get("phase") or "Pending"
            if phase == "Bound":
                continue
            spec = claim.get("spec") or {}
            modes = ",".join(spec.get("accessModes") or []) or "no access mode"
            where = f"class {spec['storageClassName']}" if spec.get("storageClassName") else "no class"
            found.append(f"claim {name} is {phase} ({modes} in {where})")
    except ClusterError:
        return []
    return found


def managed_pods() -> list[dict[str, Any]]:
    """Every pod of this installation, listed now."""
    pods, _ = cluster().managed_pods()
    return pods


def resync_due(seconds: int) -> bool:
    """True for the first caller in each `seconds` (across processes, through Redis; True when Redis cannot
    say, so the resync is never skipped for an outage)."""
    return podsummary.claim_turn(resync_turn(), seconds)


def resync_turn() -> str:
    """The name of reconcile's resync turn (one per installation)."""
    return f"reconcile-resync:{installation_id()}"


def watched_managed_pods() -> list[dict[str, Any]] | None:
    """The watcher's copy of this installation's pods (`podsummary`), or None when reconcile should not use
    one (RECONCILE_FROM_WATCH_CACHE off, no watcher publishing, or its copy is stale)."""
    if not (settings.RECONCILE_FROM_WATCH_CACHE and settings.NODE_CACHE_ENABLED):
        return None
    return podsummary.read(installation_id())


def delete_pod(pod: dict[str, Any]) -> bool:
    """Delete one pod, as listed (True when this call deleted it; False when it was gone or going)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    return cluster().delete_pod(namespace=meta["namespace"], pod=meta["name"])


def earlier_attempt_pods(job: Job) -> list[dict[str, Any]]:
    """Pods of the job's earlier attempts that still exist (running, or terminating)."""
    pods = cluster().job_pods(namespace=namespace_for(job.tenant), job_id=job.pk)
    return [p for p in pods if (pod_owner(p) or ("", job.attempt))[1] < job.attempt]


def force_delete_stranded(pods: list[dict[str, Any]]) -> int:
    """Force-delete (grace 0) the pods among `pods` that are past their deletion deadline on a node that
    is gone, NotReady or unreachable: no kubelet will confirm their deletion, and until they are gone they
    hold their namespace's quota (and cancels wait on them). Returns how many were deleted."""
    now = datetime.now(UTC)
    stranded = [p for p in pods if deletion_overdue(p, now)]
    if not stranded:
        return 0
    healthy = ready_node_names()
    deleted = 0
    for pod in stranded:
        if pod["spec"]["nodeName"] not in healthy:
            meta = pod["metadata"]
            deleted += cluster().delete_pod(namespace=meta["namespace"], pod=meta["name"], grace_seconds=0)
    return deleted


def deletion_overdue(pod: dict[str, Any], now: datetime) -> bool:
    """Whether a pod on a node is past its deletion deadline (deletionTimestamp: the grace has run out)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return _past(meta.get("deletionTimestamp"), now) and bool(spec.get("nodeName"))


def _past(stamp: str | None, now: datetime) -> bool:
    if not stamp:
        return False
    try:
        return datetime.fromisoformat(stamp) < now
    except ValueError:
        return False


def job_pods(job: Job) -> list[dict[str, Any]]:
    """The pods of the job's current attempt, as the API returns them."""
    return cluster().job_pods(namespace=namespace_for(job.tenant), job_id=job.pk, attempt=job.attempt)


def log_tail(job: Job, index: int, lines: int = 20) -> list[str]:
    """The last lines a learner of the current attempt printed ([] when its pod is gone)."""
    pod = names.learner_pod_name(job.pk, job.attempt, index)
    return cluster().pod_log_tail(namespace=namespace_for(job.tenant), pod=pod, lines=lines)


def nodes() -> list[NodeInfo]:
    """The cluster's nodes with their free capacity, for admission: the watcher's watch-backed summary
    while it is fresh, else one list of nodes and of every pod."""
    cached = nodesummary.read(installation_id())
    return cached if cached is not None else cluster().nodes()


def node_room() -> dict[str, tuple[int, int, int]]:
    """Each node's free room now (GPUs, CPU millicores, memory MiB), every pod on it counted, others' too."""
    return {n.name: (n.free.gpus, n.free.cpu_millis, n.free.memory_mib) for n in nodes()}


def node_names() -> set[str]:
    """The names of the nodes the cluster has now (the watcher's summary, else one list of nodes)."""
    cached = nodesummary.read(installation_id())
    return {node.name for node in (cached if cached is not None else cluster().node_states())}


def ready_node_names() -> set[str]:
    """The names of the nodes whose Ready condition is True (the watcher's summary, else a list of nodes)."""
    cached = nodesummary.read(installation_id())
    return {n.name for n in cached if n.ready} if cached is not None else cluster().ready_node_names()


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


GpuReadout = dict[tuple[str, str], float]


def gpu_metrics_exposed() -> bool:
    """Whether the platform has somewhere to read GPU utilisation from (a DCGM exporter, GPU_METRICS_URLS)."""
    return bool(settings.GPU_METRICS_URLS)


def gpu_readout() -> GpuReadout | None:
    """GPU utilisation (0-1) of every pod the DCGM exporters report, by (namespace, pod); None when the
    cluster exposes none. Raises ClusterError (Unavailable) when no exporter answered."""
    if not gpu_metrics_exposed():
        return None
    return gpumetrics.scrape(settings.GPU_METRICS_URLS, timeout=settings.GPU_METRICS_TIMEOUT_SECONDS)


def learner_gpu_util(job: Job, readout: GpuReadout) -> dict[int, float]:
    """Each learner of the job's current attempt's GPU utilisation in a readout, by learner index."""
    pods = {index: names.learner_pod_name(job.pk, job.attempt, index) for index in range(job.learners)}
    return gpumetrics.for_pods(readout, namespace_for(job.tenant), pods)


def learner_usage(job: Job) -> dict[int, PodUsage | None]:
    """CPU, memory (and GPU, where exposed) each learner of the current attempt uses, from metrics.k8s.io."""
    return telemetry.learner_usage(
        cluster(),
        namespace=namespace_for(job.tenant),
        job_id=job.pk,
        attempt=job.attempt,
        learners=job.learners,
    )
