"""Idle GPUs: flag a running GPU job whose GPUs sit idle (a `gpu` JobEvent `IdleGpu`, shown on its page and
sent to the owner's `idle_gpu` subscriptions), clear the flag when they are busy again (`GpuBusy`), and,
where the tenant's policy sets `idle_gpu_halt_after_seconds`, halt the job once it has been flagged that
long: its pods get SIGTERM and their grace period to checkpoint, as for a person's halt, and it ends
halted (reason IdleGpuHalted), its GPUs free for the queue, ready to be resumed from its checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from common.transactions import durable_service
from jobs.core.choices import EventKind, Reason
from jobs.core.states import JobStatus
from jobs.core.tuning.idle import IdleVerdict
from jobs.idlegpu import idle_flag, job_idle_verdict
from jobs.models import Job, JobEvent
from jobs.notifications.choices import Event
from jobs.notifications.services import notify_transition
from jobs.services.lifecycle import enqueue, transition
from jobs.services.locking import jobs_locking
from jobs.streams import job_group, send_after_commit
from tenants.policy import policy_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IdleCheck:
    """What one check did to a job: `flagged`, `cleared`, `halted` or nothing (``""``), and the verdict."""

    action: str
    verdict: IdleVerdict


@durable_service
def job_idle_gpu_check(*, job_id: str, now: datetime | None = None) -> IdleCheck | None:
    """Judge one running GPU job's utilisation and flag, clear or halt it; None when it is not a running
    GPU job."""
    now = now or timezone.now()
    job = jobs_locking().select_related("owner").get(pk=job_id)
    if job.status != JobStatus.RUNNING or not job.gpus:
        return None
    verdict = job_idle_verdict(job, now=now)
    flag = idle_flag(job)
    grace = policy_of(job.tenant).idle_gpu_halt_after_seconds
    if flag is None and verdict.idle:
        flag = _flag(job, verdict, now=now, grace=grace)
        action = "flagged"
    elif flag is not None and verdict.busy:
        _busy_again(job, verdict)
        return IdleCheck("cleared", verdict)
    else:
        action = ""
    if flag is not None and verdict.idle and grace is not None:
        flagged_at = float((flag.data or {}).get("flagged_at", flag.created_at.timestamp()))
        if now.timestamp() - flagged_at >= grace:
            _halt(job, verdict, grace=grace)
            return IdleCheck("halted", verdict)
    return IdleCheck(action, verdict)


def _flag(job: Job, verdict: IdleVerdict, *, now: datetime, grace: int | None) -> JobEvent:
    then = f"; halted after {grace} s more unless they get busy" if grace is not None else ""
    event = JobEvent.objects.create(
        job=job,
        kind=EventKind.GPU,
        reason=Reason.IDLE_GPU,
        message=f"{verdict.reason}{then}",
        data={
            "attempt": job.attempt,
            "since": verdict.since,
            "flagged_at": now.timestamp(),
            "seconds": round(verdict.seconds, 1),
            "peak": verdict.peak,
            "threshold": settings.IDLE_GPU_THRESHOLD,
            "window_seconds": settings.IDLE_GPU_WINDOW_SECONDS,
            "halt_after_seconds": grace,
        },
    )
    notify_transition(job, event=Event.IDLE_GPU, happened=event)
    send_after_commit(job_group(job.pk), {"kind": "parts", "job": job.pk})
    return event


def _busy_again(job: Job, verdict: IdleVerdict) -> None:
    JobEvent.objects.create(
        job=job,
        kind=EventKind.GPU,
        reason=Reason.GPU_BUSY,
        message=f"GPUs busy again: {verdict.reason}",
        data={"attempt": job.attempt},
    )
    send_after_commit(job_group(job.pk), {"kind": "parts", "job": job.pk})


def _halt(job: Job, verdict: IdleVerdict, *, grace: int) -> None:
    message = (
        f"halted by the tenant's idle-GPU policy: {verdict.reason}, flagged {grace} s ago; "
        "resume it to go on from its checkpoint"
    )
    enqueue("jobs.tasks.teardown", job.pk, job.attempt)
    transition(
        job,
        JobStatus.HALTING,
        reason=Reason.IDLE_GPU_HALTED,
        message=message,
        data={"idle_seconds": round(verdict.seconds, 1), "peak": verdict.peak, "halt_after_seconds": grace},
    )


def idle_gpu_check_running(*, now: datetime | None = None) -> dict[str, int]:
    """One idle-GPU check of every running GPU job (the beat task `jobs.tasks.idle_gpu`)."""
    counts = {"jobs": 0, "flagged": 0, "cleared": 0, "halted": 0}
    for job_id in Job.objects.filter(status=JobStatus.RUNNING, gpus__gt=0).values_list("pk", flat=True):
        check = job_idle_gpu_check(job_id=job_id, now=now)
        if check is None:
            continue
        counts["jobs"] += 1
        if check.action:
            counts[check.action] += 1
    return counts
