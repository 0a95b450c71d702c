"""What the tuner reads: a running job's telemetry window and diagnosis, its limits (declared range, the
tenant's free quota, the largest node), and its history, read back from its `tuning` events (so it survives
worker restarts and needs no table of its own). jobs.services.tuning decides and applies.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from jobs.core.choices import EventKind
from jobs.core.tuning.detector import Diagnosis, Point, Thresholds, diagnose
from jobs.core.tuning.policy import Allocation, History, Limits, Pending
from jobs.models import Job, TelemetrySample
from jobs.tuning.scaling import job_reclassify
from tenants.usage import tenant_usage

log = logging.getLogger(__name__)


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
    changes, last, pending, reverted, kept = 0, None, None, set(), set()
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
        if action == "keep":
            kept.add(str(data.get("direction", "")))
    return History(
        changes=changes,
        last_change_at=last,
        pending=pending,
        reverted=frozenset(reverted),
        kept=frozenset(kept),
    )


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
    warm = warm_from(job)
    if warm is None:
        return diagnose([], thresholds=thresholds())
    rows = TelemetrySample.objects.filter(job=job, attempt=job.attempt, ts__gte=max(since, warm), ts__lte=now)
    return job_reclassify(job, diagnose(window_points(rows), thresholds=thresholds()))


def warm_from(job: Job) -> datetime | None:
    """When the current attempt's warm-up is over: its first look with a speed after the first
    TUNING_WARMUP_LOOKS such looks (None: not yet). The telemetry's speed is a moving average, so the first
    looks of an attempt still carry its start-up (thread pools, first batches, a neighbour's burst at pod
    start); counting them would judge a restart on its slowest seconds."""
    skip = max(0, settings.TUNING_WARMUP_LOOKS)
    looks = (
        TelemetrySample.objects.filter(job=job, attempt=job.attempt)
        .filter(Q(samples_per_sec__isnull=False) | Q(steps_per_sec__isnull=False))
        .order_by("ts")
        .values_list("ts", flat=True)
        .distinct()
    )
    found = list(looks[skip : skip + 1])
    return found[0] if found else None
