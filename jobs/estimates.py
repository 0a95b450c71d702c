"""The Django side of queued jobs' ETAs: what the pure replay (jobs/core/eta.py) needs from the database.

Why a module of its own: the scheduling cycle must stay cheap, so this reads only the rows the replay
looks at (the finished runs it learns from, the jobs running now, and the queued jobs it estimates), with
``values()`` rather than whole rows with their specs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from jobs.core import admission, eta
from jobs.core.durations import Duration, DurationModel, FinishedRun
from jobs.core.states import JobStatus
from jobs.models import Job

LEARN_FROM = 5000
LEARN_DAYS = 30
_FIELDS = ("pk", "tenant__slug", "name", "learners", "gpus", "cpu_millis", "memory_mib")


def duration_model() -> DurationModel:
    """Learned run times from the most recent succeeded jobs (failed ones stop early and would mislead)."""
    since = timezone.now() - timedelta(days=LEARN_DAYS)
    rows = (
        Job.objects.filter(status=JobStatus.SUCCEEDED, started_at__isnull=False, finished_at__gte=since)
        .order_by("-finished_at")
        .values_list(*_FIELDS[1:], "started_at", "finished_at")[:LEARN_FROM]
    )
    return DurationModel(
        FinishedRun(tenant, name, (learners, gpus, cpu, memory), (finished - started).total_seconds())
        for tenant, name, learners, gpus, cpu, memory, started, finished in rows
    )


def _duration(model: DurationModel, row: tuple[Any, ...]) -> Duration | None:
    _, tenant, name, learners, gpus, cpu, memory, runtime = row[:8]
    shape = (learners, gpus, cpu, memory)
    return model.estimate(tenant=tenant, name=name, shape=shape, max_runtime=runtime)


def estimate(*, snapshot: admission.Snapshot, decision: admission.Decision) -> dict[str, eta.Eta]:
    """The ETA of every job ``decision`` leaves queued."""
    model = duration_model()
    wanted = [*eta.estimated_ids(snapshot, decision), *(a.job_id for a in decision.admitted)]
    rows = Job.objects.filter(pk__in=wanted).values_list(*_FIELDS, "spec__max_runtime_seconds")
    durations = {row[0]: _duration(model, row) for row in rows}
    running = Job.objects.filter(pk__in=[r.job_id for r in snapshot.running]).values_list(
        *_FIELDS, "spec__max_runtime_seconds", "started_at", "admitted_at"
    )
    facts = {}
    for row in running:
        since = row[8] or row[9]
        if since is not None:
            facts[row[0]] = eta.RunningFacts(row[1], since.timestamp(), _duration(model, row))
    return eta.estimate(snapshot, decision, durations=durations, running=facts)
