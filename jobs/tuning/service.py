"""Applying the tuner: read a running job's telemetry window, diagnose it, decide, and carry the decision
out through checkpoint-restart (the job is requeued with reason `Tuned`, which uses up no retry, and its
next attempt is admitted with the new allocation and resumes from CHECKPOINT_DIR).

Every scale, revert and keep is a JobEvent of kind `tuning` with the diagnosis and evidence in `data`;
a hold is recorded only when its cause changes, so a job that waits for stability gets one event, not
one per cycle. The tuner's history (changes, the change under evaluation, reverted directions) is read
back from those events, so it survives worker restarts and needs no table of its own.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs import cluster
from jobs.cluster import ClusterError
from jobs.core.choices import EventKind, Reason
from jobs.core.tuning.detector import Diagnosis, Point, Thresholds, diagnose
from jobs.core.tuning.policy import Allocation, Decision, History, Limits, Pending, decide
from jobs.models import Job, JobEvent, TelemetrySample
from jobs.services.lifecycle import job_requeue_or_fail
from jobs.states import JobStatus
from tenants.usage import tenant_usage

log = logging.getLogger(__name__)
EVENT_REASONS = {"scale": "Scaled", "revert": "Reverted", "keep": "Kept", "hold": "Holding"}


def tunable(job: Job) -> bool:
    """Whether the job declared a range the tuner may move within."""
    tuning = job.spec.get("tuning") or {}
    return bool(tuning.get("cpu_millis") or tuning.get("learners"))


def window_points(rows: Iterable[TelemetrySample]) -> list[Point]:
    """Job-level points from per-learner rows: one per look (rows sharing `ts`), CPU and memory averaged
    over learners, speeds summed (a learner that reported no speed makes the look's speed unknown)."""
    looks: dict[datetime, list[TelemetrySample]] = defaultdict(list)
    for row in rows:
        looks[row.ts].append(row)
    points = []
    for ts in sorted(looks):
        group = looks[ts]
        speeds = [r.samples_per_sec if r.samples_per_sec is not None else r.steps_per_sec for r in group]
        gpu = [r.gpu_util for r in group if r.gpu_util is not None]
        points.append(
            Point(
                ts=ts.timestamp(),
                cpu_used=sum(r.cpu_millis_used for r in group) / len(group),
                cpu_limit=sum(r.cpu_millis_limit for r in group) / len(group),
                memory_used=sum(r.memory_mib_used for r in group) / len(group),
                memory_limit=sum(r.memory_mib_limit for r in group) / len(group),
                speed=None if any(s is None for s in speeds) else sum(s for s in speeds if s is not None),
                learners=len(group),
                gpu_util=sum(gpu) / len(gpu) if gpu else None,
            )
        )
    return points


def tuning_history(job: Job) -> History:
    """The tuner's past decisions on this job, from its tuning events (oldest first)."""
    changes, last, pending, reverted = 0, None, None, set()
    for event in job.events.filter(kind=EventKind.TUNING).order_by("created_at", "id"):
        data: dict[str, Any] = event.data or {}
        action = data.get("action")
        if action in ("scale", "revert"):
            changes += 1
            last = event.created_at.timestamp()
        if action == "scale":
            previous = data.get("from") or {}
            pending = Pending(
                previous=Allocation(int(previous["cpu_millis"]), int(previous["learners"])),
                direction=str(data.get("direction", "")),
                speed_before=float(data.get("speed_before") or 0.0),
                at=event.created_at.timestamp(),
            )
        elif action in ("keep", "revert"):
            pending = None
        if action == "revert":
            reverted.add(str(data.get("direction", "")))
    return History(changes=changes, last_change_at=last, pending=pending, reverted=frozenset(reverted))


def thresholds() -> Thresholds:
    """The detector's knobs from settings (TUNING_MIN_SAMPLES, TUNING_STABLE_CV, TUNING_CPU_HIGH)."""
    return Thresholds(
        min_points=settings.TUNING_MIN_SAMPLES,
        stable_cv=settings.TUNING_STABLE_CV,
        cpu_high=settings.TUNING_CPU_HIGH,
    )


def job_limits(job: Job, *, max_node_cpu_millis: int | None = None) -> Limits:
    """The declared ranges (CPU capped by the biggest node, so a tuned job can still be admitted) and what
    the tenant's quota leaves free beyond everything its admitted jobs hold, this one included."""
    tuning = job.spec.get("tuning") or {}
    cpu = tuning.get("cpu_millis")
    cpu_range = (int(cpu[0]), int(cpu[1])) if cpu else None
    if cpu_range and max_node_cpu_millis:
        cpu_range = (cpu_range[0], max(cpu_range[0], min(cpu_range[1], max_node_cpu_millis)))
    learners = tuning.get("learners")
    quota = job.tenant.quota
    used = tenant_usage(job.tenant)
    return Limits(
        cpu_range=cpu_range,
        learners_range=(int(learners[0]), int(learners[1])) if learners else None,
        free_cpu_millis=max(0, quota.cpu_millis - used.cpu_millis),
        free_memory_mib=max(0, quota.memory_mib - used.memory_mib),
        free_gpus=max(0, quota.gpus - used.gpus),
        memory_mib=job.memory_mib,
        gpus=job.gpus,
        max_changes=settings.TUNING_MAX_CHANGES,
        window_seconds=settings.TUNING_WINDOW_SECONDS,
        regression_tolerance=settings.TUNING_REGRESSION_TOLERANCE,
    )


def job_diagnose(job: Job, *, now: datetime | None = None) -> Diagnosis:
    """The detector's view of the job's current attempt over the last window."""
    now = now or timezone.now()
    since = now - timedelta(seconds=settings.TUNING_WINDOW_SECONDS)
    rows = TelemetrySample.objects.filter(job=job, attempt=job.attempt, ts__gte=since, ts__lte=now)
    return diagnose(window_points(rows), thresholds=thresholds())


def job_autotune(
    *, job_id: str, now: datetime | None = None, max_node_cpu_millis: int | None = None
) -> Decision | None:
    """Diagnose one running tunable job, decide, and apply the decision; None when the job is not
    running or declares no range."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update(no_key=True).select_related("tenant").get(pk=job_id)
        if job.status != JobStatus.RUNNING or not tunable(job):
            return None
        diagnosis = job_diagnose(job, now=now)
        current = Allocation(job.cpu_millis, job.learners)
        decision = decide(
            diagnosis=diagnosis,
            current=current,
            history=tuning_history(job),
            limits=job_limits(job, max_node_cpu_millis=max_node_cpu_millis),
            now=now.timestamp(),
        )
        _record(job, decision, diagnosis, current)
        if decision.target is not None and decision.action in ("scale", "revert"):
            job.cpu_millis, job.learners = decision.target.cpu_millis, decision.target.learners
            job_requeue_or_fail(
                job,
                reason=Reason.TUNED,
                message=f"restarting from its checkpoint with {job.learners} x {job.cpu_millis}m CPU: "
                f"{decision.reason}",
                counts=False,
            )
    return decision


def _record(job: Job, decision: Decision, diagnosis: Diagnosis, current: Allocation) -> None:
    data: dict[str, Any] = {
        "action": decision.action,
        "direction": decision.direction,
        "code": decision.code,
        "attempt": job.attempt,
        "from": current.as_dict(),
        "to": decision.target.as_dict() if decision.target else None,
        "speed_before": diagnosis.speed,
        "evidence": decision.evidence,
    }
    if decision.action == "hold":
        last = job.events.filter(kind=EventKind.TUNING).order_by("-created_at", "-id").first()
        seen = last is not None and (last.data or {}).get("action") == "hold"
        if seen and last is not None and (last.data or {}).get("code") == decision.code:
            return
    JobEvent.objects.create(
        job=job,
        kind=EventKind.TUNING,
        reason=EVENT_REASONS[decision.action],
        message=decision.reason[:2000],
        data=data,
    )


def autotune_running() -> dict[str, int]:
    """One tuner pass over every running job that declares a range."""
    try:
        capacity = max((n.allocatable.cpu_millis for n in cluster.nodes() if n.ready), default=None)
    except ClusterError as exc:
        log.warning("tuner pass skipped: cluster unreachable (%s)", exc)
        return {"jobs": 0, "changes": 0}
    counts = {"jobs": 0, "changes": 0}
    for job in Job.objects.filter(status=JobStatus.RUNNING).only("pk", "spec"):
        if not tunable(job):
            continue
        decision = job_autotune(job_id=job.pk, max_node_cpu_millis=capacity)
        counts["jobs"] += 1
        counts["changes"] += decision is not None and decision.action in ("scale", "revert")
    return counts
