"""What users do to a job once it exists: cancel, halt, resume, retry, requeue, delete, and the checked state
change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from django.contrib.auth.models import User
from django.db import transaction

from common.transactions import durable_service
from jobs import cluster
from jobs.artifacts.storage import artifacts_delete
from jobs.cluster import ClusterError
from jobs.core.choices import EventKind, Reason
from jobs.core.states import STOPPING, TERMINAL, TRANSITIONS, WAITING, JobStatus
from jobs.models import Job, JobEvent, ResultFile
from jobs.services.lifecycle import enqueue, job_requeue_or_fail, transition
from jobs.services.locking import job_lock
from jobs.services.submit import JobRejected, PermissionDenied, job_submit
from tenants.scoping import Perm, can_manage_owned, has_perm


@durable_service
def job_transition(
    *,
    job_id: str,
    to: str,
    reason: str,
    message: str = "",
    data: Mapping[str, Any] | None = None,
    actor: User | None = None,
) -> Job:
    """Move a job to `to` with its row locked and record its JobEvent; IllegalTransition if not allowed."""
    job = job_lock(job_id)
    return transition(job, to, reason=reason, message=message, data=data, actor=actor)


@durable_service
def job_cancel(*, job: Job, user: User) -> Job:
    """Cancel a job: a waiting or halted one ends at once; an admitted one goes to `cancelling` until its pods
    are gone.

    Owners of the tenant may cancel any job, members only their own, viewers none.
    """
    if not can_manage_owned(user, job):
        raise PermissionDenied("you may not cancel this job")
    current = job_lock(job.pk)
    if current.status in TERMINAL:
        raise JobRejected({"": [f"job {job.pk} has already finished ({current.status})"]}, status=409)
    if current.status == JobStatus.CANCELLING:
        return current
    idle = current.status in WAITING or current.status == JobStatus.HALTED
    target = JobStatus.CANCELLED if idle else JobStatus.CANCELLING
    return _stop(current, to=target, reason=Reason.CANCELLED_BY_USER, done="cancelled", user=user)


@durable_service
def job_halt(*, job: Job, user: User) -> Job:
    """Stop a job gracefully, to resume it later from its checkpoint: a waiting one is halted at once; an
    admitted one goes to `halting` while its attempt's pods, Services and Secrets are torn down (the pods
    get SIGTERM and their grace period to save), and is halted once they are gone, its quota free again.
    The checkpoint claims stay. Halting a halting or halted job changes nothing; a finished or cancelling
    one is refused with 409. The same people may halt a job as may cancel it.
    """
    if not can_manage_owned(user, job):
        raise PermissionDenied("you may not halt this job")
    current = job_lock(job.pk)
    if current.status == JobStatus.HALTING and current.reason == Reason.PREEMPTED:
        # Its pods are stopping already; it now ends halted rather than back in the queue.
        return _note_halt(current, user)
    if current.status in (JobStatus.HALTING, JobStatus.HALTED):
        return current
    target = JobStatus.HALTED if current.status in WAITING else JobStatus.HALTING
    if target not in TRANSITIONS[current.status]:
        _refuse(current, "only a queued, starting or running job can be halted")
    return _stop(current, to=target, reason=Reason.HALTED_BY_USER, done="halted", user=user)


def _note_halt(job: Job, user: User) -> Job:
    """A person halts a job being preempted: it keeps stopping, and ends halted instead of requeued."""
    job.reason, job.message = Reason.HALTED_BY_USER, f"halted by {user.get_username()}"
    job.save(update_fields=["reason", "message", "updated_at"])
    JobEvent.objects.create(
        job=job, kind=EventKind.SCHEDULING, reason=job.reason, message=job.message, actor=user
    )
    return job


@durable_service
def job_preempt(*, job_id: str, attempt: int, message: str, data: Mapping[str, Any]) -> Job | None:
    """Stop a running or starting job for another that needs its resources (jobs.preemption): its pods get
    SIGTERM and their grace period to checkpoint, as for a halt, and once they are gone it goes back to the
    queue (reason Preempted, no retry used) to resume from its checkpoint. None when the job has moved on
    (another attempt, or no longer running)."""
    job = job_lock(job_id)
    if job.attempt != attempt or job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return None
    enqueue("jobs.tasks.teardown", job.pk, job.attempt)
    return transition(
        job, JobStatus.HALTING, reason=Reason.PREEMPTED, message=message, data={**data, "counts": False}
    )


@durable_service
def job_preempting(*, job_id: str, message: str, data: Mapping[str, Any]) -> JobEvent:
    """Tell a waiting job's owner that running jobs are being preempted to make room for it."""
    return JobEvent.objects.create(
        job_id=job_id, kind=EventKind.SCHEDULING, reason=Reason.PREEMPTING, message=message, data=dict(data)
    )


def _stop(job: Job, *, to: str, reason: str, done: str, user: User) -> Job:
    """Move a job a person stops (cancel, halt) to `to`; a stopping state (cancelling, halting) first has
    its attempt torn down, and the job leaves it once the pods are gone."""
    if to in STOPPING:
        enqueue("jobs.tasks.teardown", job.pk, job.attempt)
    return job_transition.nested(
        job_id=job.pk, to=to, reason=reason, message=f"{done} by {user.get_username()}", actor=user
    )


@durable_service
def job_resume(*, job: Job, user: User) -> Job:
    """Send a halted job back to the queue: its next attempt starts from the checkpoint in CHECKPOINT_DIR,
    as after a requeue for a node fault, and uses up no retry. Only a halted job can be resumed (409)."""
    if not can_manage_owned(user, job):
        raise PermissionDenied("you may not resume this job")
    current = job_lock(job.pk)
    if current.status != JobStatus.HALTED:
        _refuse(current, "only a halted job can be resumed")
    return job_transition.nested(
        job_id=job.pk,
        to=JobStatus.REQUEUED,
        reason=Reason.RESUMED,
        message=f"resumed by {user.get_username()}",
        data={"counts": False},
        actor=user,
    )


def _refuse(job: Job, rule: str) -> NoReturn:
    """Refuse a move the job's state does not allow: 409, with the rule and where the job is."""
    final = " (a final state)" if job.status in TERMINAL else ""
    raise JobRejected({"": [f"{rule}; job {job.pk} is {job.status}{final}"]}, status=409)


@durable_service
def job_retry(*, job: Job, user: User) -> Job:
    """Submit a finished job's spec again as a new job (terminal states are final, so no job is reused):
    the new job and the event saying what it retries, or neither."""
    if not can_manage_owned(user, job):
        raise PermissionDenied("you may not retry this job")
    if job.status not in TERMINAL:
        raise JobRejected({"": [f"job {job.pk} is still {job.status}; cancel it first"]}, status=409)
    credentials = cluster.job_inline_credentials(job)
    labels = {"experiment": job.experiment, "tags": list(job.tags)}  # as they are now, perhaps relabelled
    new = job_submit.nested(
        tenant=job.tenant,
        user=user,
        document=job.spec | labels,
        credentials=credentials,
        code=job.code,
        text=job.document,
    )
    JobEvent.objects.create(
        job=new,
        kind=EventKind.RETRY,
        reason=Reason.RETRY_OF,
        message=f"retry of {job.pk}",
        actor=user,
        data={"retry_of": job.pk},
    )
    return new


@durable_service
def job_requeue(*, job: Job, user: User) -> Job:
    """Send an admitted job back to the queue (an operator's move, e.g. to drain a node): its pods are
    deleted and it resumes from its checkpoint on the next admission; it does not use up a retry."""
    if not has_perm(user, job.tenant, Perm.MANAGE_JOBS):
        raise PermissionDenied("you may not requeue this job")
    current = job_lock(job.pk)
    if current.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        raise JobRejected(
            {"": [f"only a starting or running job can be requeued; {job.pk} is {current.status}"]},
            status=409,
        )
    return job_requeue_or_fail(
        current,
        reason=Reason.REQUEUED_BY_ADMIN,
        message=f"requeued by {user.get_username()}",
        counts=False,
        actor=user,
    )


@durable_service
def job_delete(*, job: Job, user: User) -> None:
    """Delete a finished job and everything it left: its checkpoint claim on the cluster, its result
    files and TensorBoard event files, its code archive when no other job runs that code, and its rows
    (events, logs, metrics).

    Refused (nothing deleted) for a job that has not finished, for a user who may not manage it, and,
    with 503, while the cluster cannot be asked to delete the claim.
    """
    if not can_manage_owned(user, job):
        raise PermissionDenied("you may not delete this job")
    if job.status not in TERMINAL:
        raise JobRejected({"": [f"job {job.pk} is still {job.status}; cancel it first"]}, status=409)
    try:
        cluster.delete_checkpoints(job)
    except ClusterError as exc:
        raise JobRejected(
            {"": [f"the cluster cannot delete the job's checkpoints now: {exc}"]}, status=503
        ) from exc
    current = job_lock(job.pk)
    files = [r.storage_name for r in ResultFile.objects.filter(job=current)]
    files += [
        name for chunks in current.event_files.values_list("chunks", flat=True) for _, _, name in chunks
    ]
    archive = current.code
    current.delete()
    if archive is not None and not archive.jobs.exists():
        files.append(archive.storage_name)
        archive.delete()
    transaction.on_commit(lambda: artifacts_delete(files))
