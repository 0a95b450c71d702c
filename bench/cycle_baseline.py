"""The scheduler cycle's database side as it was before the fast cycle (issue 16 item 6), kept as the
same-run baseline of ``bench/engine_bench.py`` and as the reference a test compares the snapshot with.

``build_snapshot`` reads whole Job model instances (specs and all) and resolves GPU types in a second pass;
``queue_positions_record`` locks and loads every pending job as an instance and writes the changed ones with
Django's ``bulk_update``. Never call the latter on thousands of rows against a shared database: its CASE
expressions grow with the rows (10,000 ran for about 26 minutes in PostgreSQL); the bench times it on a
1,000-row subset and scales.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from common.resources import Resources
from jobs.cluster import NodeInfo
from jobs.core import admission
from jobs.core.admission import Pending
from jobs.core.choices import EventKind, Reason
from jobs.core.eta import Eta
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, checkpoint_layout
from jobs.scheduling import _canonical_gpu_types, _node, _tenant_state, _Tolerated
from jobs.services.lifecycle import _when
from tenants.models import Tenant
from tenants.usage import usage_by_tenant

_ETA_FIELDS = ("eta", "eta_low", "eta_high", "eta_reason")


def build_snapshot(*, nodes: Sequence[NodeInfo], now: float) -> admission.Snapshot:
    """The admission input read the old way: Job instances, then a pass over the jobs for GPU types."""
    tenants = list(Tenant.objects.filter(active=True).select_related("quota"))
    usage = usage_by_tenant(tenants)
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
        jobs=[_queued(job, tolerated(job.gpus, job.tenant_id)) for job in waiting],
        tenants=[_tenant_state(t, usage[t.pk]) for t in tenants],
        nodes=[_node(n, planned[n.name]) for n in open_nodes],
        now=now,
        running=running,
    )
    return _canonical_gpu_types(snapshot)


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
        claims=0 if job.attempt else checkpoint_layout().claims(job.learners),
        storage_gib=0 if job.attempt else checkpoint_layout().storage_gib(job.learners),
    )


def queue_positions_record(pending: Iterable[Pending], etas: Mapping[str, Eta] | None = None) -> int:
    """Store each waiting job's position, reason and ETA the old way; returns how many rows it wrote."""
    by_id = {p.job_id: p for p in pending}
    jobs = list(Job.objects.filter(pk__in=by_id).select_for_update(skip_locked=True))
    changed, events = [], []
    for job in jobs:
        item = by_id[job.pk]
        estimate = (etas or {}).get(job.pk)
        times = (job.eta, job.eta_low, job.eta_high, job.eta_reason)
        if estimate is not None:
            times = (_when(estimate.start), _when(estimate.low), _when(estimate.high), estimate.reason)
        same_eta = times == (job.eta, job.eta_low, job.eta_high, job.eta_reason)
        if job.queue_position == item.position and job.message == item.reason and same_eta:
            continue
        if job.message != item.reason:
            events.append(
                JobEvent(job=job, kind=EventKind.SCHEDULING, reason=Reason.WAITING, message=item.reason)
            )
        job.queue_position, job.message, job.reason = item.position, item.reason, Reason.WAITING
        job.eta, job.eta_low, job.eta_high, job.eta_reason = times
        changed.append(job)
    Job.objects.bulk_update(changed, ["queue_position", "message", "reason", *_ETA_FIELDS])
    JobEvent.objects.bulk_create(events)
    return len(changed)
