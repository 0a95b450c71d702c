"""The Django side of queued jobs' ETAs: what the pure replay (jobs/core/eta.py) needs from the database.

Why a module of its own: the scheduling cycle must stay cheap, so this reads only the rows the replay
looks at (the finished runs it learns from, the jobs running now, and the queued jobs it estimates), with
``values()`` rather than whole rows with their specs.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from jobs.columns import elapsed, epoch, spec_number
from jobs.core import admission, eta
from jobs.core.durations import Duration, DurationModel, FinishedRun
from jobs.core.states import JobStatus
from jobs.models import Job

LEARN_FROM = 5000
LEARN_DAYS = 30
_SHAPE = ("learners", "gpus", "cpu_millis", "memory_mib")
_RUNTIME = spec_number("max_runtime_seconds")
_SINCE = epoch("started_at", "admitted_at")
_RAN = elapsed("started_at", "finished_at")


def duration_model() -> DurationModel:
    """Learned run times from the most recent succeeded jobs (failed ones stop early and would mislead)."""
    since = timezone.now() - timedelta(days=LEARN_DAYS)
    rows = (
        Job.objects.filter(status=JobStatus.SUCCEEDED, started_at__isnull=False, finished_at__gte=since)
        .order_by("-finished_at")
        .values_list("tenant__slug", "name", *_SHAPE, _RAN)[:LEARN_FROM]
    )
    return DurationModel(
        FinishedRun(tenant, name, (learners, gpus, cpu, memory), seconds)
        for tenant, name, learners, gpus, cpu, memory, seconds in rows
    )


def estimate(*, snapshot: admission.Snapshot, decision: admission.Decision) -> dict[str, eta.Eta]:
    """The ETA of every job ``decision`` leaves queued.

    The queued jobs' tenants and shapes come from the snapshot; only their names (what durations are
    learned by) and the running jobs' start times are read here."""
    model = duration_model()
    queued = {job.id: job for job in snapshot.jobs}
    wanted = [*eta.estimated_ids(snapshot, decision), *(a.job_id for a in decision.admitted)]
    names = Job.objects.filter(pk__in=wanted).values_list("id", "name")
    durations = {pk: _duration(model, queued[pk], name) for pk, name in names if pk in queued}
    running = {r.job_id for r in snapshot.running}
    facts = {}
    for (
        pk,
        slug,
        name,
        learners,
        gpus,
        cpu,
        memory,
        runtime,
        since,
    ) in Job.objects.holding_resources().values_list("id", "tenant__slug", "name", *_SHAPE, _RUNTIME, _SINCE):
        if pk in running and since is not None:
            shape = (learners, gpus, cpu, memory)
            duration = model.estimate(tenant=slug, name=name, shape=shape, max_runtime=runtime)
            facts[pk] = eta.RunningFacts(slug, since, duration)
    return eta.estimate(snapshot, decision, durations=durations, running=facts)


def _duration(model: DurationModel, job: admission.QueuedJob, name: str) -> Duration | None:
    shape = (job.learners, job.gpus, job.cpu_millis, job.memory_mib)
    return model.estimate(tenant=job.tenant, name=name, shape=shape, max_runtime=job.expected_duration)
