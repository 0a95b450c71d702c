"""The scheduler cycle: snapshot the queue, quotas and nodes, run the pure admission function, apply it,
then preempt what waiting jobs need back (jobs.preemption). With preemption on, admission offers jobs within
their tenant's nominal quota before borrowing ones, so that the room a reclaim frees goes to the lender.

Runs from Celery beat every few seconds and after every submit and finish; a PostgreSQL advisory lock
makes sure two workers never run a cycle at once (so a job is never admitted twice).
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from common.resources import Resources
from jobs import cluster, estimates, preemption
from jobs.cluster import NodeInfo
from jobs.core import admission, fairshare
from jobs.core.states import JobStatus
from jobs.fairshare import tenants_decayed_usage
from jobs.models import Job
from jobs.services import job_validate
from jobs.services.lifecycle import job_admit, queue_positions_record
from tenants.models import Tenant
from tenants.usage import Usage, usage_by_tenant

log = logging.getLogger(__name__)
LOCK_KEY = zlib.crc32(b"trainyard-scheduler-cycle")


@dataclass
class CycleResult:
    """What one cycle did: the jobs it admitted, how many wait, which it preempted, and whether it ran."""

    ran: bool
    admitted: list[str] = field(default_factory=list)
    pending: int = 0
    preempted: list[str] = field(default_factory=list)


def build_snapshot(*, nodes: Sequence[NodeInfo], now: float) -> admission.Snapshot:
    """The admission input from the database (queue, tenants, admitted jobs) and the cluster's nodes.

    Jobs that are `starting` may not have pods bound yet, so their planned placement is taken off the
    nodes' free capacity as well (counting them twice for a moment errs on the safe side). Each queued job
    carries the node taints its pods will tolerate, so admission offers it only nodes it may run on. What
    each tenant holds comes from `usage_by_tenant`, as on its page; its past usage, for fair share over
    time, from `tenants_decayed_usage` (nothing while FAIR_SHARE_HALF_LIFE_SECONDS is 0).
    """
    tenants = list(Tenant.objects.filter(active=True).select_related("quota"))
    usage = usage_by_tenant(tenants)
    decayed = tenants_decayed_usage(tenants=tenants, now=now)
    active = Job.objects.holding_resources()
    waiting = Job.objects.waiting().filter(tenant__in=tenants).select_related("tenant")
    planned: dict[str, Resources] = defaultdict(lambda: Resources.ZERO)
    running = []
    for job in active:
        if job.status == JobStatus.STARTING:
            for node in job.placements:
                planned[node] += job.per_learner
        runtime = job.spec.get("max_runtime_seconds")
        started = job.started_at or job.admitted_at
        running.append(
            admission.RunningJob(
                job_id=job.pk,
                ends_at=started.timestamp() + runtime if runtime and started else None,
                placements=tuple(job.placements),
                per_learner=job.per_learner,
            )
        )
    open_nodes = [n for n in nodes if n.ready and not n.unschedulable]
    tolerated = _Tolerated(open_nodes)
    snapshot = admission.Snapshot(
        jobs=[_queued(job, tolerated(job.gpus)) for job in waiting],
        tenants=[_tenant_state(t, usage[t.pk], decayed=decayed.get(t.slug, fairshare.NONE)) for t in tenants],
        nodes=[_node(n, planned[n.name]) for n in open_nodes],
        now=now,
        running=running,
    )
    return _canonical_gpu_types(snapshot)


def _canonical_gpu_types(snapshot: admission.Snapshot) -> admission.Snapshot:
    """Nodes and jobs with canonical GPU types (GPU_TYPE_ALIASES), so that admission's plain comparison
    matches a job's `A100` with a node's `NVIDIA-A100-SXM4-40GB` and `tesla-t4` with `Tesla-T4`, and its
    reasons name the type as users write it. Applying it twice changes nothing."""
    types = cluster.gpu_types()
    known = types.known(n.gpu_type for n in snapshot.nodes)
    nodes = [
        replace(n, gpu_type=types.resolve(n.gpu_type, known)) if n.gpu_type else n for n in snapshot.nodes
    ]
    jobs = [
        replace(j, gpu_type=types.resolve(j.gpu_type, known) or types.canonical(j.gpu_type))
        if j.gpu_type
        else j
        for j in snapshot.jobs
    ]
    return replace(snapshot, nodes=nodes, jobs=jobs)


class _Tolerated:
    """The node taints (spelt as `admission.Node.taints`) a job's pods tolerate, worked out once per kind of
    learner (with or without GPUs: that alone decides its tolerations)."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self.taints = {taint for node in nodes for taint in node.taints}
        self.known: dict[bool, frozenset[str]] = {}

    def __call__(self, gpus: int) -> frozenset[str]:
        if not self.taints:
            return frozenset()
        with_gpus = gpus > 0
        if with_gpus not in self.known:
            found = cluster.tolerated_taints(gpus=gpus, taints=self.taints)
            self.known[with_gpus] = frozenset(str(t) for t in found)
        return self.known[with_gpus]


def _queued(job: Job, tolerated: frozenset[str]) -> admission.QueuedJob:
    return admission.QueuedJob(
        id=job.pk,
        tenant=job.tenant.slug,
        priority=job.priority,
        submitted_at=job.created_at.timestamp(),
        learners=job.learners,
        gpus=job.gpus,
        cpu_millis=job.cpu_millis,
        memory_mib=job.memory_mib,
        gpu_type=job.spec["resources"].get("gpu_type"),
        expected_duration=job.spec.get("max_runtime_seconds"),
        tolerated=tolerated,
    )


def _tenant_state(
    tenant: Tenant, usage: Usage, *, decayed: fairshare.Triple = fairshare.NONE
) -> admission.TenantState:
    quota = tenant.quota
    return admission.TenantState(
        name=tenant.slug,
        weight=tenant.weight,
        quota=quota.resources,
        max_running_jobs=quota.max_running_jobs,
        used=usage.held,
        running_jobs=usage.running_jobs,
        borrowing_limit=quota.borrowing_limit,
        cohort=quota.cohort,
        decayed=decayed,
    )


def _node(node: NodeInfo, planned: Resources) -> admission.Node:
    """A node as admission sees it (clusterio keeps its own triple, converted here at the boundary)."""
    free, allocatable = node.free, node.allocatable
    return admission.Node(
        name=node.name,
        free=Resources(
            max(0, free.gpus - planned.gpus),
            max(0, free.cpu_millis - planned.cpu_millis),
            max(0, free.memory_mib - planned.memory_mib),
        ),
        capacity=Resources(allocatable.gpus, allocatable.cpu_millis, allocatable.memory_mib),
        gpu_type=node.gpu_type,
        taints=tuple(str(t) for t in node.taints),
    )


def run_cycle(*, nodes: Sequence[NodeInfo]) -> CycleResult:
    """One admission cycle over `nodes`; a no-op when another cycle holds the lock."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                return CycleResult(ran=False)
        snapshot = build_snapshot(nodes=nodes, now=timezone.now().timestamp())
        if not snapshot.jobs:
            return CycleResult(ran=True)
        decision = admission.admit(snapshot, nominal_first=settings.PREEMPTION != "off")
        etas = estimates.estimate(snapshot=snapshot, decision=decision)
        admitted = [_admit(a) for a in decision.admitted]
        queue_positions_record(decision.pending, etas)
        preempted = preemption.preempt(snapshot=snapshot, decision=decision)
    return CycleResult(
        ran=True,
        admitted=admitted,
        pending=len(decision.pending),
        preempted=[p.victim for p in preempted],
    )


def _admit(decision: admission.Admission) -> str:
    job_admit.nested(job_id=decision.job_id, placements=decision.placements, borrowed=decision.borrowed)
    return decision.job_id


@dataclass(frozen=True)
class DryRun:
    """What the scheduler would do with a spec now: start it (on which nodes) or queue it (where, why)."""

    starts: bool
    nodes: list[str] = field(default_factory=list)
    position: int | None = None
    reason: str = ""


def job_dry_run(
    *, tenant: Tenant, user: User, document: str, nodes: tuple[list[NodeInfo] | None, str]
) -> DryRun:
    """Validate `document` as `job_submit` would and run one admission cycle with it added; stores nothing.

    `nodes` is the cluster's nodes, or None and why it could not be reached. Raises JobRejected for a spec
    that would be refused.
    """
    parsed, demand = job_validate(tenant=tenant, user=user, document=document, nodes=nodes)
    found, cluster_error = nodes
    if found is None:
        return DryRun(starts=False, reason=f"cluster unreachable, cannot tell ({cluster_error})")
    now = timezone.now().timestamp()
    snapshot = build_snapshot(nodes=found, now=now)
    tolerated = _Tolerated(n for n in found if n.ready and not n.unschedulable)
    spec = parsed.spec
    candidate = admission.QueuedJob(
        id="(this job)",
        tenant=tenant.slug,
        priority=spec["priority"],
        submitted_at=now,
        learners=demand.learners,
        gpus=demand.gpus,
        cpu_millis=demand.cpu_millis,
        memory_mib=demand.memory_mib,
        gpu_type=spec["resources"].get("gpu_type"),
        expected_duration=spec.get("max_runtime_seconds"),
        tolerated=tolerated(demand.gpus),
    )
    decision = admission.admit(
        _canonical_gpu_types(replace(snapshot, jobs=[*snapshot.jobs, candidate])),
        nominal_first=settings.PREEMPTION != "off",
    )
    for admitted in decision.admitted:
        if admitted.job_id == candidate.id:
            return DryRun(starts=True, nodes=list(admitted.placements))
    pending = next((p for p in decision.pending if p.job_id == candidate.id), None)
    if pending is None:
        return DryRun(starts=False, reason="the scheduler did not consider it")
    return DryRun(starts=False, position=pending.position, reason=pending.reason)
