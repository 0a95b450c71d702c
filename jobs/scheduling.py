"""The scheduler cycle: snapshot the queue, quotas and nodes, run the pure admission function, apply it,
then preempt what waiting jobs need back (jobs.preemption). With preemption on, admission offers jobs within
their tenant's nominal quota before borrowing ones, so that the room a reclaim frees goes to the lender.

Runs from Celery beat every few seconds and after every submit and finish; a PostgreSQL advisory lock
makes sure two workers never run a cycle at once (so a job is never admitted twice).
"""

from __future__ import annotations

import gc
import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models.expressions import Combinable
from django.utils import timezone

from common.podoverrides import OverridesError, node_matches, overrides_clean, overrides_select_nodes
from common.resources import Resources
from jobs import cluster, estimates, preemption
from jobs.cluster import NodeInfo
from jobs.columns import KT, epoch, spec_number
from jobs.core import admission, fairshare
from jobs.core.pools import is_potential
from jobs.core.states import JobStatus
from jobs.cyclereads import CycleReads, Running
from jobs.fairshare import tenants_decayed_usage
from jobs.models import Job, checkpoint_layout
from jobs.services import job_validate
from jobs.services.lifecycle import POSITION_COLUMNS, job_admit, queue_positions_record
from tenants.models import Policy, Tenant
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


# What the snapshot reads: the columns it needs, never whole rows (a spec can be large, and model instances
# are slow to build by the ten thousand).
_HOLDING_COLUMNS: tuple[str | Combinable, ...] = (
    "id", "status", "placements", "gpus", "cpu_millis", "memory_mib", spec_number("max_runtime_seconds"),
    epoch("started_at", "admitted_at"), "tenant__slug", "name", "learners",
)  # fmt: skip
_WAITING_COLUMNS: tuple[str | Combinable, ...] = (
    "id", "tenant_id", "priority", epoch("created_at"), "learners", "gpus", "cpu_millis", "memory_mib",
    KT("spec__resources__gpu_type"), spec_number("max_runtime_seconds"), "attempt",
)  # fmt: skip


def build_snapshot(
    *, nodes: Sequence[NodeInfo], now: float, reads: CycleReads | None = None
) -> admission.Snapshot:
    """The admission input from the database (queue, tenants, admitted jobs) and the cluster's nodes.

    Jobs that are `starting` may not have pods bound yet, so their planned placement is taken off the
    nodes' free capacity as well (counting them twice for a moment errs on the safe side). Each queued job
    carries the node taints its pods will tolerate, so admission offers it only nodes it may run on, and
    its GPU type in canonical form (`_GpuTypes`). What each tenant holds comes from `usage_by_tenant`, as on
    its page; its past usage, for fair share over time, from `tenants_decayed_usage` (nothing while
    FAIR_SHARE_HALF_LIFE_SECONDS is 0). Jobs are read as plain tuples of the columns needed: a cycle reads
    ten thousand of them. A held job (`jobs.services.launches`) is left out until its hold ends.

    `reads`, when given, gets what the cycle's later steps need of the same rows, read by the same queries:
    each queued job's name and stored position, reason and ETA (`POSITION_COLUMNS`, for
    `queue_positions_record` to compare with), and the running jobs' tenants and names (for the ETAs).
    """
    tenants = list(Tenant.objects.filter(active=True).select_related("quota"))
    usage = usage_by_tenant(tenants, queued=False)
    decayed = tenants_decayed_usage(tenants=tenants, now=now)
    planned: dict[str, Resources] = defaultdict(lambda: Resources.ZERO)
    running = []
    for (
        pk,
        status,
        placements,
        gpus,
        cpu,
        memory,
        runtime,
        started,
        slug,
        name,
        learners,
    ) in Job.objects.holding_resources().values_list(*_HOLDING_COLUMNS):
        per_learner = Resources(gpus, cpu, memory)
        if reads is not None:
            reads.running.append(Running(pk, slug, name, (learners, gpus, cpu, memory), runtime, started))
        if status == JobStatus.STARTING:
            for node in placements:
                planned[node] += per_learner
        running.append(
            admission.RunningJob(
                job_id=pk,
                ends_at=started + runtime if runtime and started is not None else None,
                placements=tuple(placements),
                per_learner=per_learner,
            )
        )
    # What NODE_POOLS may still add counts as empty nodes (jobs.core.pools): a job that fits a pool at its
    # maximum size is admitted, and its unpinned pods make the cluster autoscaler add the nodes.
    nodes = [*nodes, *cluster.potential_pool_nodes(nodes)]
    open_nodes = [n for n in nodes if n.ready and not n.unschedulable]
    tolerated = _Tolerated(open_nodes)
    types = _GpuTypes(n.gpu_type for n in open_nodes)
    slugs = {t.pk: t.slug for t in tenants}
    columns = _WAITING_COLUMNS if reads is None else (*_WAITING_COLUMNS, "name", *POSITION_COLUMNS[1:])
    # Unsorted and unfiltered in SQL: PostgreSQL sorts the wide rows and matches twenty tenant ids slower
    # than Python drops the few rows of inactive tenants and sorts by the epoch float (as `-created_at`).
    # A held job (jobs.services.launches: a namespace quota kept refusing it, its namespace is not this
    # installation's) is not offered until its hold ends or reconcile releases it.
    offered = Job.objects.waiting().exclude(held_until__gt=timezone.now()).order_by()
    waiting = [row for row in offered.values_list(*columns) if row[1] in slugs]
    waiting.sort(key=itemgetter(3), reverse=True)
    if reads is not None:
        name_at = len(_WAITING_COLUMNS)
        reads.names = {row[0]: row[name_at] for row in waiting}
        reads.positions = [(row[0], *row[name_at + 1 :]) for row in waiting]
    job_type = types.job
    layout = checkpoint_layout()
    return admission.Snapshot(
        # Positional arguments, in QueuedJob's field order: keywords take twice as long, ten thousand times.
        jobs=[
            admission.QueuedJob(
                pk,
                slugs[tenant],
                priority,
                submitted_at,
                learners,
                gpus,
                cpu,
                memory,
                job_type(gpu_type),
                runtime,
                tolerated(gpus, tenant),
                # Claims are made at the first launch: a requeued or resumed job's are counted in its usage.
                0 if attempt else layout.claims(learners),
                0 if attempt else layout.storage_gib(learners),
            )
            for (
                pk,
                tenant,
                priority,
                submitted_at,
                learners,
                gpus,
                cpu,
                memory,
                gpu_type,
                runtime,
                attempt,
                *_,
            ) in waiting
        ],
        tenants=[_tenant_state(t, usage[t.pk], decayed=decayed.get(t.slug, fairshare.NONE)) for t in tenants],
        nodes=[
            _node(n, planned[n.name], types.node(n.gpu_type), tolerated.node_taints(n)) for n in open_nodes
        ],
        now=now,
        running=running,
    )


def _canonical_gpu_types(snapshot: admission.Snapshot) -> admission.Snapshot:
    """Nodes and jobs with canonical GPU types (`_GpuTypes`); applying it twice changes nothing."""
    types = _GpuTypes(n.gpu_type for n in snapshot.nodes)
    nodes = [replace(n, gpu_type=types.node(n.gpu_type)) if n.gpu_type else n for n in snapshot.nodes]
    jobs = [replace(j, gpu_type=types.job(j.gpu_type)) if j.gpu_type else j for j in snapshot.jobs]
    return replace(snapshot, nodes=nodes, jobs=jobs)


class _GpuTypes:
    """Canonical GPU types (GPU_TYPE_ALIASES) among the nodes' own, so that admission's plain comparison
    matches a job's `A100` with a node's `NVIDIA-A100-SXM4-40GB` and `tesla-t4` with `Tesla-T4`, and its
    reasons name the type as users write it. A job's type is worked out once per spelling."""

    def __init__(self, products: Iterable[str | None]) -> None:
        self.types = cluster.gpu_types()
        self.known = self.types.known(products)
        self.jobs: dict[str, str | None] = {}

    def node(self, product: str | None) -> str | None:
        return self.types.resolve(product, self.known) if product else product

    def job(self, name: str | None) -> str | None:
        if not name:
            return name
        if name not in self.jobs:
            self.jobs[name] = self.types.resolve(name, self.known) or self.types.canonical(name)
        return self.jobs[name]


class _Tolerated:
    """The node taints (spelt as `admission.Node.taints`) a job's pods tolerate, worked out once per kind of
    learner (with or without GPUs) and tenant: the learner's own tolerations and those the operator's pod
    overrides add (POD_OVERRIDES, and the tenant policies', read in one query).

    The overrides' node selectors and required node affinity are told to admission in the same terms: a node
    the pods of a tenant cannot go to (by POD_OVERRIDES merged with the tenant's own, as the pods carry them)
    carries a taint of that tenant's (`SELECTOR_TAINT`; the global one for tenants without their own) that
    every other tenant tolerates (`node_taints`)."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self.taints = {taint for node in nodes for taint in node.taints}
        self.known: dict[tuple[bool, int], frozenset[str]] = {}
        global_doc = cluster.global_pod_overrides()
        rows = Policy.objects.exclude(pod_overrides={}).values_list(
            "tenant_id", "tenant__slug", "pod_overrides"
        )
        checked = [(tenant, slug, _checked(slug, doc)) for tenant, slug, doc in rows]
        self.overrides: dict[int, dict[str, Any]] = {tenant: doc for tenant, _, doc in checked}
        # Who selects nodes: the tenants whose own overrides do (their pods carry the global selection merged
        # with theirs), and every other tenant when the global overrides do (0); each with its taint.
        self.selecting: dict[int, tuple[dict[str, Any], str]] = {
            tenant: (_selection(global_doc, doc), SELECTOR_TAINT.format(tenant=f"={slug}"))
            for tenant, slug, doc in checked
            if overrides_select_nodes(doc)
        }
        if overrides_select_nodes(global_doc):
            self.selecting[0] = (global_doc, SELECTOR_TAINT.format(tenant=""))

    def node_taints(self, node: NodeInfo) -> tuple[str, ...]:
        """The selector taints of those whose pods cannot go to `node` (none on a node a pool has yet to add:
        its labels are not known yet, and its pods, not bound to a node, carry the selector to the autoscaler)."""
        if not self.selecting or is_potential(node.name):
            return ()
        labels = dict(node.labels)
        return tuple(taint for doc, taint in self.selecting.values() if not node_matches(doc, labels))

    def __call__(self, gpus: int, tenant_id: int) -> frozenset[str]:
        if not self.taints and not self.selecting:
            return frozenset()
        own = self.overrides.get(tenant_id) or {}
        group = tenant_id if tenant_id in self.selecting else 0
        key = (gpus > 0, tenant_id if own.get("tolerations") or group else 0)
        if key not in self.known:
            overrides = cluster.overrides_in_order(own)
            found = cluster.tolerated_taints(gpus=gpus, taints=self.taints, overrides=overrides)
            others = (taint for who, (_, taint) in self.selecting.items() if who != group)
            self.known[key] = frozenset((*(str(t) for t in found), *others))
        return self.known[key]


def _checked(slug: str, document: Any) -> dict[str, Any]:
    """A tenant's pod overrides, checked again: a row written past the policy's checks counts as none here
    (its launches fail with the reason) rather than stopping the cycle for every tenant."""
    try:
        return overrides_clean(document)
    except OverridesError as exc:
        log.error("tenant %s: pod overrides ignored by admission: %s", slug, exc)
        return {}


def _selection(global_doc: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """Where a tenant's pods may go, as they carry it: the node selectors merged (the tenant's win) and every
    affinity requirement of both."""
    return {
        "node_selector": {**global_doc.get("node_selector", {}), **own.get("node_selector", {})},
        "node_affinity": [*global_doc.get("node_affinity", []), *own.get("node_affinity", [])],
    }


# The taint a node carries, for admission only, where pod overrides' node selector or affinity keep a tenant's
# pods off it (`=<slug>` for a tenant's own, none for POD_OVERRIDES'); everyone else tolerates it.
SELECTOR_TAINT = "trainyard.io/pod-overrides{tenant}:NoSchedule"


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
        max_claims=quota.max_claims,
        storage_quota_gib=quota.storage_gib,
        claims=usage.claims,
        storage_gib=usage.storage_gib,
    )


def _node(
    node: NodeInfo, planned: Resources, gpu_type: str | None = None, extra_taints: tuple[str, ...] = ()
) -> admission.Node:
    """A node as admission sees it (clusterio keeps its own triple, converted here at the boundary), with
    ``gpu_type`` (canonical) in place of its own label when given, and ``extra_taints`` (`_Tolerated.node_taints`)."""
    free, allocatable = node.free, node.allocatable
    return admission.Node(
        name=node.name,
        free=Resources(
            max(0, free.gpus - planned.gpus),
            max(0, free.cpu_millis - planned.cpu_millis),
            max(0, free.memory_mib - planned.memory_mib),
        ),
        capacity=Resources(allocatable.gpus, allocatable.cpu_millis, allocatable.memory_mib),
        gpu_type=gpu_type or node.gpu_type,
        taints=(*(str(t) for t in node.taints), *extra_taints),
    )


def run_cycle(*, nodes: Sequence[NodeInfo]) -> CycleResult:
    """One admission cycle over `nodes`; a no-op when another cycle holds the lock."""
    with _collector_paused(), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                return CycleResult(ran=False)
        return _cycle(nodes)


def _cycle(nodes: Sequence[NodeInfo]) -> CycleResult:
    """The cycle's work, in a function of its own so that what it built (the snapshot, the decision, the
    ETAs) is gone before the collector resumes (`_collector_paused`)."""
    reads = CycleReads()
    snapshot = build_snapshot(nodes=nodes, now=timezone.now().timestamp(), reads=reads)
    if not snapshot.jobs:
        return CycleResult(ran=True)
    decision = admission.admit(snapshot, nominal_first=settings.PREEMPTION != "off")
    etas = estimates.estimate(snapshot=snapshot, decision=decision, reads=reads)
    admitted = [_admit(a) for a in decision.admitted]
    queue_positions_record(decision.pending, etas, stored=reads.positions)
    preempted = preemption.preempt(snapshot=snapshot, decision=decision)
    return CycleResult(
        ran=True,
        admitted=admitted,
        pending=len(decision.pending),
        preempted=[p.victim for p in preempted],
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the cycle (as it was again after it).

    A cycle builds some hundred thousand small objects (rows, queued jobs, their ETAs), which sets off full
    collections over every object of the process, Django's included: about a tenth of a second each, more
    than the rest of a warm cycle. The cycle's objects hold hardly any reference cycles: they go with their
    reference counts when it ends, and the collector, back on, finds the few others. They must be gone before
    it resumes: the first allocation after would otherwise set off a collection over all of them."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


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
        tolerated=tolerated(demand.gpus, tenant.pk),
        claims=checkpoint_layout().claims(demand.learners),
        storage_gib=checkpoint_layout().storage_gib(demand.learners),
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
