"""Preemption in the scheduler cycle: after admission, stop the running jobs `jobs.core.preemption` chooses so
that waiting jobs may start (reclaim of lent quota; priority within a tenant whose policy allows it).

A victim is stopped as a halt is (SIGTERM, then LEARNER_TERMINATION_GRACE_SECONDS to checkpoint) and goes
back to the queue once its pods are gone (`job_preempt`, `job_pods_gone`); the job it made room for is
admitted by a later cycle. What a victim would lose is the time since its attempt's last checkpoint line
(`Learner.checkpoint_at`, from `{"checkpoint": step}` in its log), or since its admission when it has none.
A job is protected for PREEMPTION_MIN_RUNTIME_SECONDS after its latest admission, doubled for each time it
was preempted before (its `requeued` events of reason Preempted): `protection_seconds`, the planner's
anti-thrash back-off.
Settings: PREEMPTION (the victim order, or "off") and PREEMPTION_MIN_RUNTIME_SECONDS.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from common.resources import Resources
from jobs.columns import epoch
from jobs.core import admission
from jobs.core.borrowing import over_nominal
from jobs.core.choices import JobStatus, Reason
from jobs.core.preemption import Preemption, Victim, plan, protection_seconds
from jobs.core.states import STOPPING
from jobs.models import Job, JobEvent, Learner
from jobs.services.control import job_preempt, job_preempting
from tenants.models import Policy


def running_jobs(now: float) -> tuple[list[Victim], list[Victim]]:
    """The jobs holding resources as preemption sees them: those that may be stopped (starting, running)
    and those already stopping.

    Each job's latest checkpoint and its count of preemptions are subqueries, each through its own index,
    rather than joins of all its learners and events grouped back into one row per job."""
    learners = Learner.objects.filter(
        job=OuterRef("pk"), attempt=OuterRef("attempt"), checkpoint_at__isnull=False
    )
    preemptions = (
        JobEvent.objects.filter(job=OuterRef("pk"), to_status=JobStatus.REQUEUED, reason=Reason.PREEMPTED)
        .order_by()
        .values("job")
        .annotate(count=Count("pk"))
        .values("count")
    )
    rows = (
        Job.objects.holding_resources()
        .annotate(
            checkpoint=Subquery(learners.order_by("-checkpoint_at").values("checkpoint_at")[:1]),
            preempted=Coalesce(Subquery(preemptions), 0),
        )
        .values_list(
            "id", "tenant__slug", "priority", "status", epoch("admitted_at"), "placements", "gpus",
            "cpu_millis", "memory_mib", "borrowed", epoch("checkpoint"), "preempted",
        )
    )  # fmt: skip
    victims: list[Victim] = []
    releasing: list[Victim] = []
    minimum = settings.PREEMPTION_MIN_RUNTIME_SECONDS
    for (
        job_id,
        tenant,
        priority,
        status,
        admitted_at,
        placements,
        gpus,
        cpu,
        memory,
        borrowed,
        checkpoint,
        preempted,
    ) in rows:
        admitted = admitted_at if admitted_at is not None else now
        saved = max(admitted, checkpoint) if checkpoint is not None else admitted
        victim = Victim(
            job_id=job_id,
            tenant=tenant,
            priority=priority,
            admitted_at=admitted,
            placements=tuple(placements),
            per_learner=Resources(gpus, cpu, memory),
            since_checkpoint=max(0.0, now - saved),
            protected=now - admitted < protection_seconds(minimum, preempted),
            borrowed=borrowed,
        )
        (releasing if status in STOPPING else victims).append(victim)
    return victims, releasing


def preempt(*, snapshot: admission.Snapshot, decision: admission.Decision) -> list[Preemption]:
    """Plan and start this cycle's preemptions (inside the cycle's transaction); [] when PREEMPTION is off."""
    if settings.PREEMPTION == "off" or not decision.pending:
        return []
    allowed = set(Policy.objects.filter(preempt_lower_priority=True).values_list("tenant__slug", flat=True))
    if not allowed and not any(over_nominal(t.used.as_shape(), t.nominal) for t in snapshot.tenants):
        return []  # nothing lent to take back, and no tenant preempts by priority
    victims, releasing = running_jobs(snapshot.now)
    if not victims:
        return []
    found = plan(
        snapshot, decision, victims, releasing=releasing, order=settings.PREEMPTION, priority_tenants=allowed
    )
    by_id = {v.job_id: v for v in victims}
    attempts = dict(Job.objects.filter(pk__in=[p.victim for p in found]).values_list("id", "attempt"))
    done: dict[str, list[Preemption]] = defaultdict(list)
    for item in found:
        victim = by_id[item.victim]
        stopped = job_preempt.nested(
            job_id=item.victim,
            attempt=attempts[item.victim],
            message=_victim_message(item, victim),
            data={
                "kind": item.kind,
                "by_tenant": item.preemptor_tenant,
                **({"by_job": item.preemptor} if item.kind == "priority" else {}),
                "lost_gpu_seconds": item.lost_gpu_seconds,
                "since_checkpoint_seconds": round(victim.since_checkpoint),
            },
        )
        if stopped is not None:
            done[item.preemptor].append(item)
    for preemptor, items in done.items():
        job_preempting.nested(
            job_id=preemptor,
            message=_preemptor_message(items),
            data={
                "victims": len(items),
                "lost_gpu_seconds": round(sum(i.lost_gpu_seconds for i in items), 1),
            },
        )
    return [item for items in done.values() for item in items]


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _victim_message(item: Preemption, victim: Victim) -> str:
    """What the stopped job's owner reads: who needed the resources (never another tenant's job ids) and
    what it loses."""
    if item.kind == "reclaim":
        why = (
            f"preempted: tenant {item.preemptor_tenant} takes back the quota this job borrowed "
            "(it is within its guaranteed share)"
        )
    else:
        why = f"preempted by job {item.preemptor} of higher priority (the tenant's policy allows it)"
    lost = f"{_ago(victim.since_checkpoint)} of work since its last checkpoint is lost"
    if victim.per_learner.gpus:
        lost += f" ({item.lost_gpu_seconds / 3600:.2f} GPU-hours)"
    return f"{why}; {lost}; it goes back to the queue and resumes from its checkpoint"


def _preemptor_message(items: list[Preemption]) -> str:
    if items[0].kind == "reclaim":
        return (
            f"preempting {len(items)} job(s) of other tenants running on borrowed quota, so that this job "
            "can start within its tenant's guaranteed quota"
        )
    ids = ", ".join(item.victim for item in items)
    return f"preempting lower-priority job(s) {ids} of this tenant"
