"""What the idle-GPU check reads: a GPU job's utilisation looks (its telemetry rows, grouped per look), the
verdict of jobs.core.tuning.idle over them, and the job's idle flag, read back from its `gpu` events (so it
survives worker restarts and needs no table). jobs.services.idlegpu flags, notifies and halts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from jobs.core.choices import EventKind, Reason
from jobs.core.states import JobStatus
from jobs.core.tuning.idle import GpuLook, IdleVerdict, busiest, idle_verdict
from jobs.models import Job, JobEvent, TelemetrySample
from tenants.policy import policy_of

LOOKS_MARGIN = 3
"""How many telemetry intervals before the window are read too, so the spell's start is seen."""


def gpu_looks(job: Job, *, since: datetime, until: datetime) -> list[GpuLook]:
    """The current attempt's looks between `since` and `until`, oldest first: the busiest learner's GPU
    use, None where a learner had no reading or fewer learners than the job has were sampled."""
    rows = TelemetrySample.objects.filter(job=job, attempt=job.attempt, ts__gte=since, ts__lte=until)
    looks: dict[datetime, list[float | None]] = defaultdict(list)
    for ts, util in rows.values_list("ts", "gpu_util"):
        looks[ts].append(util)
    return [
        GpuLook(ts.timestamp(), busiest(utils) if len(utils) >= job.learners else None)
        for ts, utils in sorted(looks.items())
    ]


def job_idle_verdict(job: Job, *, now: datetime | None = None) -> IdleVerdict:
    """Whether the job's GPUs are idle now (IDLE_GPU_THRESHOLD over IDLE_GPU_WINDOW_SECONDS)."""
    now = now or timezone.now()
    window = settings.IDLE_GPU_WINDOW_SECONDS
    since = now - timedelta(seconds=window + LOOKS_MARGIN * settings.TELEMETRY_INTERVAL_SECONDS)
    return idle_verdict(
        gpu_looks(job, since=since, until=now), threshold=settings.IDLE_GPU_THRESHOLD, window_seconds=window
    )


def idle_flag(job: Job) -> JobEvent | None:
    """The `IdleGpu` event that flags the job's current attempt, or None when its GPUs are not flagged
    (never idle, busy again since, or the job is not running)."""
    if not job.gpus or job.status != JobStatus.RUNNING:
        return None
    last = (
        job.events.filter(kind=EventKind.GPU, data__attempt=job.attempt)
        .order_by("-created_at", "-id")
        .first()
    )
    return last if last is not None and last.reason == Reason.IDLE_GPU else None


@dataclass(frozen=True)
class IdleFlag:
    """What the job page says about an idle job: since when, for how long, and when it is halted (None:
    its tenant's policy never halts)."""

    event: JobEvent
    since: datetime
    halt_at: datetime | None


def job_idle_flag(job: Job) -> IdleFlag | None:
    """The job page's idle-GPU flag, or None."""
    event = idle_flag(job)
    if event is None:
        return None
    data = event.data or {}
    flagged = datetime.fromtimestamp(float(data.get("flagged_at", event.created_at.timestamp())), tz=UTC)
    since = datetime.fromtimestamp(float(data.get("since", flagged.timestamp())), tz=UTC)
    grace = policy_of(job.tenant).idle_gpu_halt_after_seconds
    return IdleFlag(event, since, flagged + timedelta(seconds=grace) if grace is not None else None)
