"""Writes about launching that keep a launch from repeating itself: the lease that makes one launch chain per
attempt, and the holds that keep admission from offering a job again while what refused it still stands.

A launch chain (one Celery task and its retries, which keep their task id) takes the attempt's lease
before it talks to the cluster and extends it over each back-off; a second chain for the same attempt (a
reconcile that saw no pods yet, a redelivered message of another task) finds the lease live and stops. The
lease is one conditional UPDATE (compare-and-set on the row), and it expires, so a worker that died
holding it delays the next chain only by the lease's length.

A hold keeps a waiting job out of admission's snapshot until `held_until`, or until what `held_on` names
changes (reconcile looks): a namespace ResourceQuota that kept refusing the pods, or a namespace that is
not this installation's. Without it, admission would start the job again at once and meet the same refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from common.transactions import durable_service
from jobs.core.choices import Reason
from jobs.core.states import WAITING, JobStatus
from jobs.models import Job
from jobs.services.lifecycle import enqueue, job_requeue_or_fail
from jobs.services.locking import job_lock

log = logging.getLogger(__name__)


def _lease_value(attempt: int, token: str) -> str:
    return f"{attempt}/{token}"[:64]


def launch_lease_take(*, job_id: str, attempt: int, token: str, seconds: float) -> bool:
    """Take (or extend) the attempt's launch lease for `seconds`: True when this chain (`token`) holds it
    now, False when another chain's lease for this attempt is live (or the attempt is no longer starting)."""
    now = timezone.now()
    mine = _lease_value(attempt, token)
    free = (
        Q(launch_lease=mine)
        | ~Q(launch_lease__startswith=f"{attempt}/")
        | Q(launch_lease_until__isnull=True)
        | Q(launch_lease_until__lt=now)
    )
    taken = Job.objects.filter(free, pk=job_id, attempt=attempt, status=JobStatus.STARTING).update(
        launch_lease=mine, launch_lease_until=now + timedelta(seconds=seconds)
    )
    return taken == 1


def launch_lease_drop(*, job_id: str, attempt: int, token: str) -> None:
    """Give the lease back once the chain has ended (launched, refused or requeued)."""
    Job.objects.filter(pk=job_id, launch_lease=_lease_value(attempt, token)).update(
        launch_lease="", launch_lease_until=None
    )


def launching(job: Job, now: object = None) -> bool:
    """Whether a launch chain holds the job's current attempt now."""
    now = now or timezone.now()
    return bool(
        job.launch_lease.startswith(f"{job.attempt}/")
        and job.launch_lease_until is not None
        and job.launch_lease_until > now  # type: ignore[operator]
    )


@durable_service
def launch_held(
    *, job_id: str, attempt: int, reason: str, message: str, held_on: str, seconds: float
) -> bool:
    """Send a starting job back to the queue without using a retry and keep admission from offering it for
    `seconds`, or until what `held_on` names changes (`holds_release`). True when it was sent back."""
    job = job_lock(job_id)
    if job.attempt != attempt or job.status != JobStatus.STARTING:
        return False
    job.held_until = timezone.now() + timedelta(seconds=seconds)
    job.held_on = held_on[:300]
    job_requeue_or_fail(job, reason=reason, message=message, counts=False)
    return True


@durable_service
def launch_waiting(*, job_id: str, attempt: int, message: str) -> bool:
    """Say on a starting job why its launch waits (`PodsPending`: e.g. for its pool's nodes to be provisioned);
    True when the message changed."""
    jobs = Job.objects.filter(pk=job_id, attempt=attempt, status=JobStatus.STARTING).exclude(message=message)
    return bool(jobs.update(message=message[:1000], reason=Reason.PODS_PENDING))


def held_keys() -> set[str]:
    """What the waiting jobs held now are held on (each key once), for reconcile to look at."""
    now = timezone.now()
    return set(
        Job.objects.filter(status__in=WAITING, held_until__gt=now)
        .exclude(held_on="")
        .values_list("held_on", flat=True)
    )


@durable_service
def holds_release(*, keys: Collection[str]) -> int:
    """Let admission offer again the waiting jobs held on `keys` (what held them changed); returns how many."""
    if not keys:
        return 0
    released = Job.objects.filter(status__in=WAITING, held_on__in=list(keys)).update(
        held_until=None, held_on=""
    )
    if released:
        log.info("released %d held job(s): %s", released, ", ".join(sorted(keys)))
        enqueue("jobs.tasks.schedule")
    return released
