"""Applying the tuner: diagnose a running job's telemetry window, decide, and carry the decision out through
checkpoint-restart (the job is requeued with reason `Tuned`, which uses up no retry, and its next attempt is
admitted with the new allocation and resumes from CHECKPOINT_DIR).

Every scale, revert and keep is a JobEvent of kind `tuning` with the diagnosis and evidence in `data`; a
hold is recorded only when its cause changes, so a job that waits for stability gets one event, not one per
cycle.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.utils import timezone

from common.transactions import durable_service
from jobs import cluster
from jobs.cluster import ClusterError
from jobs.core.choices import EventKind, Reason
from jobs.core.states import JobStatus
from jobs.core.tuning.detector import Diagnosis
from jobs.core.tuning.policy import Allocation, Decision, decide
from jobs.models import Job, JobEvent
from jobs.services.lifecycle import job_requeue_or_fail
from jobs.services.locking import job_lock
from jobs.tuning.selectors import job_diagnose, job_limits, tunable, tuning_history

log = logging.getLogger(__name__)
EVENT_REASONS = {"scale": "Scaled", "revert": "Reverted", "keep": "Kept", "hold": "Holding"}


@durable_service
def job_autotune(
    *, job_id: str, now: datetime | None = None, max_node_cpu_millis: int | None = None
) -> Decision | None:
    """Diagnose one running tunable job, decide, and apply the decision; None when the job is not
    running or declares no range."""
    now = now or timezone.now()
    job = job_lock(job_id)
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
