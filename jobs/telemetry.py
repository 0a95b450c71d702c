"""Telemetry of running jobs: each learner's CPU and memory use (metrics.k8s.io) beside its limits, and
its training speed (from the job's own metric lines), one `TelemetrySample` row per learner per look.

The tuner (jobs/tuning/) reads these rows, never the cluster, so its decisions can be replayed and
tested from recorded series.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, Min, QuerySet
from django.utils import timezone

from jobs import cluster
from jobs.cluster import ClusterError
from jobs.core.states import JobStatus
from jobs.models import Job, MetricSample, TelemetrySample

log = logging.getLogger(__name__)
SAMPLES_RATE_NAMES = ("samples_per_sec", "samples/s", "throughput", "examples_per_sec")
STEPS_RATE_NAMES = ("steps_per_sec", "steps/s", "it/s")
SPEED_LOOKS = 3


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def learner_speed(
    *, job_id: str, attempt: int, learner: int, since: datetime, until: datetime
) -> tuple[float | None, float | None]:
    """(samples/s, steps/s) one learner reported between `since` and `until`: the mean of its rate metrics,
    and for steps, where it prints no rate, the rate of its step counter over the metric lines' times."""
    points = MetricSample.objects.filter(
        job_id=job_id, attempt=attempt, learner=learner, ts__gt=since, ts__lte=until
    )
    samples = _mean(points.filter(name__in=SAMPLES_RATE_NAMES).values_list("value", flat=True))
    steps = _mean(points.filter(name__in=STEPS_RATE_NAMES).values_list("value", flat=True))
    if steps is None:
        span = points.filter(step__isnull=False).aggregate(
            first=Min("step"), last=Max("step"), t0=Min("ts"), t1=Max("ts")
        )
        if span["t0"] is not None and span["t1"] > span["t0"] and span["last"] > span["first"]:
            steps = (span["last"] - span["first"]) / (span["t1"] - span["t0"]).total_seconds()
    return samples, steps


def telemetry_record(
    *, job_id: str, now: datetime | None = None, gpu: cluster.GpuReadout | None = None
) -> int:
    """Take one look at a running job's learners and store it; returns the rows written (0 when the job
    is not running or the metrics API has no sample yet). `gpu`: the DCGM exporters' readout of this
    look (jobs/cluster.gpu_readout), for GPU utilisation where metrics.k8s.io has none."""
    job = Job.objects.select_related("tenant").get(pk=job_id)
    if job.status != JobStatus.RUNNING:
        return 0
    now = now or timezone.now()
    usage = cluster.learner_usage(job)
    gpu_util = cluster.learner_gpu_util(job, gpu) if gpu and job.gpus else {}
    previous = TelemetrySample.objects.filter(job=job, attempt=job.attempt).aggregate(last=Max("ts"))[
        "last"
    ] or now - timedelta(seconds=settings.TELEMETRY_INTERVAL_SECONDS)
    # Speed is averaged over at least SPEED_LOOKS intervals, so a job that prints a metric line less often
    # than it is sampled still has a speed at every look (a moving average, which also damps jitter).
    since = min(previous, now - timedelta(seconds=SPEED_LOOKS * settings.TELEMETRY_INTERVAL_SECONDS))
    rows = []
    for learner, used in usage.items():
        if used is None:
            continue
        samples, steps = learner_speed(
            job_id=job.pk, attempt=job.attempt, learner=learner, since=since, until=now
        )
        rows.append(
            TelemetrySample(
                job=job,
                attempt=job.attempt,
                learner=learner,
                ts=now,
                cpu_millis_used=used.cpu_millis,
                cpu_millis_limit=job.cpu_millis,
                memory_mib_used=used.memory_mib,
                memory_mib_limit=job.memory_mib,
                samples_per_sec=samples,
                steps_per_sec=steps,
                gpu_util=used.gpu_util if used.gpu_util is not None else gpu_util.get(learner),
            )
        )
    TelemetrySample.objects.bulk_create(rows)
    return len(rows)


def telemetry_record_running() -> dict[str, int]:
    """One look at every running job (a job whose pods cannot be read is skipped, and logged)."""
    counts = {"jobs": 0, "samples": 0, "errors": 0}
    running = list(Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", "gpus"))
    gpu = None
    if any(gpus for _, gpus in running):
        try:
            gpu = cluster.gpu_readout()  # once per look, for every job
        except ClusterError as exc:
            log.warning("GPU utilisation not read: %s", exc)
    for job_id, _ in running:
        try:
            written = telemetry_record(job_id=job_id, gpu=gpu)
        except ClusterError as exc:
            log.warning("telemetry of %s skipped: %s", job_id, exc)
            counts["errors"] += 1
            continue
        counts["jobs"] += 1
        counts["samples"] += written
    return counts


def telemetry_list(*, job: Job, attempt: int | None = None, limit: int = 2000) -> QuerySet[TelemetrySample]:
    """A job's telemetry rows, oldest first (the newest `limit`); the caller got `job` through job_get."""
    rows = job.telemetry.all()
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    newest = rows.order_by("-ts", "-learner").values_list("pk", flat=True)[:limit]
    return TelemetrySample.objects.filter(pk__in=list(newest)).order_by("ts", "learner")
