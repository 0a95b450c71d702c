"""The Django side of queued jobs' ETAs: what the pure replay (jobs/core/eta.py) needs from the database.

Why a module of its own: the scheduling cycle must stay cheap, so this reads only the rows the replay
learns from (the finished runs), with ``values()`` rather than whole rows with their specs; what it needs
of the queued and running jobs the cycle's snapshot read already (`jobs.cyclereads`).
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from jobs.columns import elapsed
from jobs.core import admission, eta
from jobs.core.durations import Duration, DurationModel, FinishedRun
from jobs.core.states import JobStatus
from jobs.cyclereads import CycleReads
from jobs.models import Job

LEARN_FROM = 5000
LEARN_DAYS = 30
_SHAPE = ("learners", "gpus", "cpu_millis", "memory_mib")
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


def estimate(
    *, snapshot: admission.Snapshot, decision: admission.Decision, reads: CycleReads
) -> dict[str, eta.Eta]:
    """The ETA of every job ``decision`` leaves queued.

    The queued jobs' tenants and shapes come from the snapshot, their names (what durations are learned
    by) and the running jobs' tenants, names and start times from what it read beside (``reads``); only
    the finished runs to learn from are read here."""
    model = duration_model()
    queued = {job.id: job for job in snapshot.jobs}
    wanted = [*eta.estimated_ids(snapshot, decision), *(a.job_id for a in decision.admitted)]
    names = reads.names
    durations = {pk: _duration(model, queued[pk], names[pk]) for pk in wanted if pk in queued}
    facts = {
        job.job_id: eta.RunningFacts(
            job.tenant,
            job.since,
            model.estimate(tenant=job.tenant, name=job.name, shape=job.shape, max_runtime=job.max_runtime),
        )
        for job in reads.running
        if job.since is not None
    }
    return eta.estimate(snapshot, decision, durations=durations, running=facts)


def _duration(model: DurationModel, job: admission.QueuedJob, name: str) -> Duration | None:
    shape = (job.learners, job.gpus, job.cpu_millis, job.memory_mib)
    return model.estimate(tenant=job.tenant, name=name, shape=shape, max_runtime=job.expected_duration)
