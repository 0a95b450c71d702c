"""What the tuner knows of a distributed job's scaling: its speed at each learner count it has run at with
its current CPU per learner, read back from its `tuning` events (each records the allocation it judged and
the stable speed there) and its current window; jobs.core.tuning.scaling judges it."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from jobs.core.choices import EventKind
from jobs.core.tuning.detector import Diagnosis
from jobs.core.tuning.scaling import reclassify, scaling_verdict
from jobs.models import Job


def learner_speeds(job: Job, diagnosis: Diagnosis) -> dict[int, float]:
    """The latest stable speed measured at each learner count with the job's current CPU per learner (the
    current window's when it is stable)."""
    speeds: dict[int, float] = {}
    for event in job.events.filter(kind=EventKind.TUNING).order_by("created_at", "id"):
        data: dict[str, Any] = event.data or {}
        at, speed = data.get("from") or {}, data.get("speed_before")
        stable = (data.get("evidence") or {}).get("stable")
        if stable and speed and at.get("cpu_millis") == job.cpu_millis and at.get("learners"):
            speeds[int(at["learners"])] = float(speed)
    if diagnosis.stable and diagnosis.speed:
        speeds[job.learners] = diagnosis.speed
    return speeds


def job_reclassify(job: Job, diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis, as `communication_bound` where the job's learner counts show it stopped scaling (only
    for a job with a learner range: nothing else could act on it)."""
    if not (job.spec.get("tuning") or {}).get("learners"):
        return diagnosis
    verdict = scaling_verdict(
        learner_speeds(job, diagnosis), current=job.learners, min_gain=settings.TUNING_SCALING_MIN_GAIN
    )
    return reclassify(diagnosis, verdict)
