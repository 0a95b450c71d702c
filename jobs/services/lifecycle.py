"""Engine-side writes: admission, launch outcomes, pod verdicts, requeues, logs and metrics.

Each function takes ids, locks the job row, refuses stale input (an older attempt, a finished job) and
records what it changed as a JobEvent, so running one twice is harmless.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from common.transactions import durable_service
from jobs import outbox
from jobs.core.admission import Pending
from jobs.core.choices import EventKind, Reason, VerdictState
from jobs.core.eta import Eta
from jobs.core.podstate import IMAGE_PULL_REASONS, LearnerView, Verdict
from jobs.core.policy import full_image_name
from jobs.core.states import ACTIVE, STOPPING, TERMINAL, WAITING, JobStatus
from jobs.models import Job, JobEvent, Learner
from jobs.notifications.choices import event_for_transition
from jobs.notifications.services import notify_transition
from jobs.services.locking import job_lock
from jobs.streams import job_group, send_after_commit, tenant_group
from tenants.registries import registry_hint

log = logging.getLogger(__name__)


def enqueue(task: str, *args: Any, countdown: float = 0) -> None:
    """Queue a Celery task by name with the current transaction, through the outbox (jobs/outbox.py): sent
    once the transaction commits (never before the rows exist), or later by the drain while the broker is
    down, so a Redis outage neither holds up nor fails the request that caused it."""
    outbox.enqueue(task, *args, countdown=countdown)


def transition(
    job: Job,
    to: str,
    *,
    reason: str,
    message: str = "",
    data: Mapping[str, Any] | None = None,
    actor: User | None = None,
) -> Job:
    """Move a locked job row to `to`, save it, record the event (with the person who did it, if one did)
    and tell live viewers after commit."""
    previous = job.status
    job.set_status(to)
    job.reason, job.message = reason, message
    if to not in WAITING:
        job.queue_position = None
        job.eta = job.eta_low = job.eta_high = None
        job.eta_reason = ""
    job.save()
    happened = JobEvent.objects.create(
        job=job,
        kind=EventKind.TRANSITION,
        from_status=previous,
        to_status=to,
        reason=reason,
        message=message,
        data=dict(data or {}),
        actor=actor,
    )
    state = {
        "kind": "status", "job": job.pk, "status": to, "reason": reason, "message": message,
        "borrowed": job.borrowed,
    }  # fmt: skip
    send_after_commit(job_group(job.pk), state)
    send_after_commit(tenant_group(job.tenant.slug), state)
    event = event_for_transition(to, reason)
    if event is not None:
        notify_transition(job, event=event, happened=happened)
    if to in TERMINAL or to in (JobStatus.REQUEUED, JobStatus.HALTED):
        enqueue("jobs.tasks.schedule")
    return job


def _locked(job_id: str) -> Job:
    return job_lock(job_id)  # the job row only, FOR NO KEY UPDATE (jobs/services/locking.py says why)


@durable_service
def job_admit(*, job_id: str, placements: Sequence[str], borrowed: bool = False) -> Job | None:
    """Start the next attempt of a waiting job on the planned nodes and queue its launch; ``borrowed``: the
    admission put its tenant above its nominal quota (jobs.core.borrowing)."""
    job = _locked(job_id)
    if job.status not in WAITING:
        return None
    job.attempt += 1
    job.placements = list(placements)
    job.borrowed = borrowed
    Learner.objects.bulk_create(
        [
            Learner(job=job, attempt=job.attempt, index=i, pod_name="", node=node)
            for i, node in enumerate(placements)
        ],
        ignore_conflicts=True,
    )
    transition(
        job,
        JobStatus.STARTING,
        reason=Reason.ADMITTED,
        message=f"attempt {job.attempt} admitted on {', '.join(sorted(set(placements)))}"
        + (" (borrowed quota)" if borrowed else ""),
        data={"attempt": job.attempt, "placements": list(placements), "borrowed": borrowed},
    )
    enqueue("jobs.tasks.launch", job.pk, job.attempt)
    return job


@durable_service
def job_launched(*, job_id: str, attempt: int, pod_names: Sequence[str]) -> None:
    """Record the pods a launch created (or adopted) for the attempt.

    A launch that finished after the job moved on (cancelled, requeued, or a newer attempt) created pods
    nobody wants, possibly after their teardown had already run: they are torn down again.
    """
    job = _locked(job_id)
    if job.attempt != attempt or job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        enqueue("jobs.tasks.teardown", job_id, attempt)
        return
    for index, name in enumerate(pod_names):
        Learner.objects.filter(job=job, attempt=attempt, index=index).update(pod_name=name)
    JobEvent.objects.create(
        job=job,
        kind=EventKind.POD,
        reason=Reason.PODS_CREATED,
        message=f"created {len(pod_names)} pod(s)",
    )


def job_requeue_or_fail(
    job: Job,
    *,
    reason: str,
    message: str,
    counts: bool = True,
    infra: bool = False,
    actor: User | None = None,
) -> Job:
    """Back to the queue while the budget the fault draws on lasts, else fail.

    `infra=True`: a disruption by the cluster (eviction, preemption by the scheduler, node loss, pod GC,
    a kubelet admission rejection, webhook or apiserver errors at launch): it draws on the job's
    infrastructure budget (INFRA_RETRY_LIMIT, then `DisruptionBudgetExhausted`), never on its `retries`.
    Otherwise `counts=True` uses one of the job's `retries` and `counts=False` (a pod stuck pending, a
    tuning restart, an operator's requeue) uses nothing.
    """
    enqueue("jobs.tasks.teardown", job.pk, job.attempt)
    if infra:
        used = JobEvent.objects.filter(job=job, to_status=JobStatus.REQUEUED, data__infra=True).count()
        if used >= settings.INFRA_RETRY_LIMIT:
            return transition(
                job,
                JobStatus.FAILED,
                reason=Reason.DISRUPTION_BUDGET_EXHAUSTED,
                message=f"{message} (disrupted more than INFRA_RETRY_LIMIT, {used}, times)",
                data={"last_reason": reason},
            )
        return transition(
            job,
            JobStatus.REQUEUED,
            reason=reason,
            message=message,
            data={"counts": False, "infra": True},
            actor=actor,
        )
    failures = JobEvent.objects.filter(job=job, to_status=JobStatus.REQUEUED, data__counts=True).count()
    if counts and failures >= job.max_retries:
        return transition(
            job,
            JobStatus.FAILED,
            reason=Reason.RETRIES_EXHAUSTED,
            message=f"{message} (no retries left: {job.max_retries} used)",
            data={"last_reason": reason},
        )
    return transition(
        job, JobStatus.REQUEUED, reason=reason, message=message, data={"counts": counts}, actor=actor
    )


@durable_service
def job_apply_verdict(
    *, job_id: str, attempt: int, verdict: Verdict, log_tail: Sequence[str] = ()
) -> Job | None:
    """Move a job where its pods say it is; ignores verdicts about an older attempt or a final job.

    A halting job ignores them all: its pods were told to stop, and how they exit (0 after a last save, or
    143 on SIGTERM) does not say whether training finished; it is halted once they are gone, and a job that
    did finish meanwhile ends at once when resumed from its last checkpoint.
    """
    job = _locked(job_id)
    if job.attempt != attempt or job.status not in ACTIVE or job.status == JobStatus.HALTING:
        return None
    status = job.status
    if verdict.state == VerdictState.RUNNING and status == JobStatus.STARTING:
        return transition(job, JobStatus.RUNNING, reason=Reason.RUNNING, message=verdict.message)
    if verdict.state == VerdictState.SUCCEEDED:
        transition(job, JobStatus.SUCCEEDED, reason=verdict.reason, message=verdict.message)
        enqueue("jobs.tasks.teardown", job.pk, attempt)
        return job
    if verdict.state == VerdictState.FAILED and _pull_may_recover(job, verdict):
        # Registries fail transiently; the kubelet keeps retrying, and so does the job for a while.
        return _note_pod_reason(job, verdict)
    if verdict.state == VerdictState.FAILED:
        if status == JobStatus.CANCELLING:
            return transition(job, JobStatus.CANCELLED, reason=Reason.CANCELLED, message="pods stopped")
        transition(
            job,
            JobStatus.FAILED,
            reason=verdict.reason,
            message=_with_registry_hint(job, verdict),
            data={"learner": verdict.learner, "log_tail": list(log_tail)},
        )
        enqueue("jobs.tasks.teardown", job.pk, attempt)
        return job
    if verdict.state == VerdictState.REQUEUE and status != JobStatus.CANCELLING:
        return job_requeue_or_fail(job, reason=verdict.reason, message=verdict.message, infra=True)
    if verdict.state == VerdictState.STARTING and verdict.reason == Reason.UNSCHEDULABLE:
        return _note_pod_reason(job, verdict)
    return job


def _with_registry_hint(job: Job, verdict: Verdict) -> str:
    """The kubelet's words on a pull that failed for good, and whether the tenant has credentials for the
    image's registry (the platform cannot tell a private registry from a missing image)."""
    if verdict.reason not in IMAGE_PULL_REASONS:
        return verdict.message
    host = full_image_name(str(job.spec.get("image") or "")).partition("/")[0]
    return f"{verdict.message} ({registry_hint(tenant=job.tenant, host=host)})"


def _pull_may_recover(job: Job, verdict: Verdict) -> bool:
    """Whether an image-pull failure is still within IMAGE_PULL_GRACE_SECONDS of the attempt's admission."""
    if (
        verdict.reason not in IMAGE_PULL_REASONS
        or job.status != JobStatus.STARTING
        or job.admitted_at is None
    ):
        return False
    return (timezone.now() - job.admitted_at).total_seconds() < settings.IMAGE_PULL_GRACE_SECONDS


def _note_pod_reason(job: Job, verdict: Verdict) -> Job:
    """Show why a starting job waits (the scheduler's or the kubelet's words), one event per new reason; the
    job's message follows the latest words (a claim still binding, then the taint that really stops it)."""
    if job.reason != verdict.reason:
        job.reason, job.message = verdict.reason, verdict.message
        job.save(update_fields=["reason", "message", "updated_at"])
        JobEvent.objects.create(job=job, kind=EventKind.POD, reason=verdict.reason, message=verdict.message)
    elif not job.message.startswith(verdict.message):
        job.message = verdict.message
        job.save(update_fields=["message", "updated_at"])
    return job


@durable_service
def job_pods_gone(*, job_id: str, attempt: int) -> Job | None:
    """A stopping job whose pods are all gone ends: a cancelling one is cancelled, a halting one halted (its
    quota is free again; its checkpoint claims stay for `job_resume`), a preempted one back in the queue to
    resume from its checkpoint (no retry used), one stopped past its max_runtime failed (DeadlineExceeded)."""
    job = _locked(job_id)
    if job.attempt != attempt or job.status not in STOPPING:
        return None
    if job.status == JobStatus.HALTING and job.reason == Reason.PREEMPTED:
        message = "preempted; back in the queue, it resumes from its last checkpoint"
        return transition(
            job, JobStatus.REQUEUED, reason=Reason.PREEMPTED, message=message, data={"counts": False}
        )
    if job.status == JobStatus.HALTING and job.reason == Reason.DEADLINE_EXCEEDED:
        runtime = job.spec.get("max_runtime_seconds")
        message = f"ran past max_runtime ({runtime} s); its pods stopped after their grace period"
        return transition(job, JobStatus.FAILED, reason=Reason.DEADLINE_EXCEEDED, message=message)
    if job.status == JobStatus.HALTING:
        message = "all pods stopped; resume it to go on from its checkpoint"
        if job.reason == Reason.IDLE_GPU_HALTED:  # the owner's `halted` notification says why
            return transition(job, JobStatus.HALTED, reason=job.reason, message=f"{message} ({job.message})")
        return transition(job, JobStatus.HALTED, reason=Reason.HALTED, message=message)
    return transition(job, JobStatus.CANCELLED, reason=Reason.CANCELLED, message="all pods stopped")


@durable_service
def learner_node_unready(*, job_id: str, attempt: int, view: LearnerView) -> JobEvent | None:
    """Record, once per learner and attempt, that a running learner's node stopped answering: the cluster
    replaces it after NODE_LOST_GRACE_SECONDS unless the node comes back."""
    job = _locked(job_id)
    if job.attempt != attempt or job.status not in ACTIVE:
        return None
    data = {"attempt": attempt, "learner": view.index, "node": view.node}
    if JobEvent.objects.filter(job=job, reason=Reason.NODE_NOT_READY, data=data).exists():
        return None
    message = (
        f"learner {view.index}: node {view.node or '?'} stopped answering; the job resumes elsewhere "
        f"after {settings.NODE_LOST_GRACE_SECONDS} s unless it comes back"
    )
    return JobEvent.objects.create(
        job=job, kind=EventKind.POD, reason=Reason.NODE_NOT_READY, message=message, data=data
    )


def learner_update(*, job_id: str, attempt: int, view: LearnerView) -> None:
    """Keep the learner row in step with its pod (phase, node, exit code, and the reason it gives now: a
    waiting reason such as PodInitializing goes once the container runs; a deleted pod keeps its last)."""
    fields: dict[str, Any] = {"phase": view.phase or "Deleted"}
    if view.node:
        fields["node"] = view.node
    if view.exit_code is not None:
        fields["exit_code"] = view.exit_code
    reason = view.terminated_reason or view.waiting_reason or view.pod_reason
    if reason or view.phase:
        fields["reason"] = reason[:64]
    Learner.objects.filter(job_id=job_id, attempt=attempt, index=view.index).update(**fields)


@durable_service
def launch_refused(
    job_id: str,
    attempt: int,
    exc: Exception,
    *,
    reason: str = Reason.LAUNCH_REFUSED,
    what: str = "the cluster refused",
) -> None:
    """Fail the job with the refusal's words, and tear down what the launch created before it."""
    job = _locked(job_id)
    if job.attempt == attempt and job.status == JobStatus.STARTING:
        transition(job, JobStatus.FAILED, reason=reason, message=f"{what}: {exc}")
        enqueue("jobs.tasks.teardown", job.pk, attempt)


@durable_service
def launch_requeued(
    job_id: str, attempt: int, reason: str, message: str, counts: bool = True, infra: bool = False
) -> None:
    """Send the job back to the queue after a launch that kept failing for a reason that may pass
    (`infra`: the cluster's, e.g. a failing admission webhook: no retry used; see job_requeue_or_fail)."""
    job = _locked(job_id)
    if job.attempt == attempt and job.status == JobStatus.STARTING:
        job_requeue_or_fail(job, reason=reason, message=message, counts=counts, infra=infra)


@durable_service
def job_deadline_exceeded(*, job_id: str, attempt: int, learner: int) -> Job | None:
    """Stop a job whose learner has run for its max_runtime (from its pod's startTime, as the kubelet
    counts `activeDeadlineSeconds`) as a halt stops it: `halting`, reason DeadlineExceeded, its pods get
    SIGTERM and their grace period, during which the launcher still uploads RESULT_DIR (the attempt's
    token holds while the job is active); once the pods are gone it fails, DeadlineExceeded
    (`job_pods_gone`). None when the attempt has moved on or is no longer starting or running."""
    job = _locked(job_id)
    if job.attempt != attempt or job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return None
    runtime = job.spec.get("max_runtime_seconds")
    enqueue("jobs.tasks.teardown", job.pk, job.attempt)
    return transition(
        job,
        JobStatus.HALTING,
        reason=Reason.DEADLINE_EXCEEDED,
        message=f"learner {learner} ran for its max_runtime ({runtime} s); stopping its pods",
        data={"learner": learner, "max_runtime_seconds": runtime},
    )


@durable_service
def job_repair(stale: Job, reason: str, message: str = "") -> int:
    """Requeue a job the reconcile loop found stuck (PendingTimeout: no retry used), bound to a node that is
    gone or that lost the room for it (NodeGone, NodeTaken) or without its pods (PodLost: pod GC or node
    loss): those three are disruptions, drawn on the infrastructure budget, never on retries."""
    job = _locked(stale.pk)
    if job.attempt != stale.attempt or job.status != stale.status:
        return 0
    if reason in (Reason.NODE_GONE, Reason.NODE_TAKEN):
        job_requeue_or_fail(job, reason=reason, message=message, infra=True)
    elif reason == Reason.PENDING_TIMEOUT:
        why = job.message if job.reason == Reason.UNSCHEDULABLE else "its pods did not start in time"
        earlier = JobEvent.objects.filter(job=job, to_status=JobStatus.REQUEUED, reason=reason).count()
        if earlier + 1 >= settings.PENDING_TIMEOUT_LIMIT:
            # Pending for a reason admission cannot see (a taint, an unbound claim, affinity): another
            # round would wait the same way, so the job fails with the scheduler's own words.
            enqueue("jobs.tasks.teardown", job.pk, job.attempt)
            transition(
                job,
                JobStatus.FAILED,
                reason=Reason.UNSCHEDULABLE if job.reason == Reason.UNSCHEDULABLE else reason,
                message=f"{why} (pending past PENDING_TIMEOUT_SECONDS {earlier + 1} times)",
            )
        else:
            job_requeue_or_fail(job, reason=reason, message=why, counts=False)
    else:
        job_requeue_or_fail(job, reason=reason, message="its pods disappeared from the cluster", infra=True)
    return 1


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


# What the cycle stores on a waiting job, with the SQL type each value is sent as (a bare `varchar`, not the
# column's `varchar(n)`: an explicit cast would cut a long value short where the column refuses it).
_POSITION_FIELDS = (
    ("queue_position", "integer"),
    ("message", "text"),
    ("reason", "varchar"),
    ("eta", "timestamptz"),
    ("eta_low", "timestamptz"),
    ("eta_high", "timestamptz"),
    ("eta_reason", "varchar"),
)
_POSITION_NAMES = tuple(name for name, _ in _POSITION_FIELDS)
POSITION_COLUMNS = ("id", *_POSITION_NAMES)
"""The columns `queue_positions_record` compares, id first (a caller that reads them already passes them)."""
_WRITE_CHUNK = 2000
_Stored = tuple[Any, ...]


def queue_positions_record(
    pending: Iterable[Pending],
    etas: Mapping[str, Eta] | None = None,
    *,
    stored: Iterable[_Stored] | None = None,
) -> int:
    """Store each waiting job's position, reason and ETA (from `etas`, when given); an event only when the
    reason changes (an ETA moves too often to be worth one). Returns how many rows it wrote.

    A cycle leaves most of ten thousand waiting jobs as they were, so the stored values are read as plain
    tuples and only the rows that change are locked (a row another transaction holds is skipped: the next
    cycle catches up) and written, one UPDATE per chunk. A job that stopped waiting meanwhile is left alone.
    `stored`: the waiting jobs' `POSITION_COLUMNS` as the caller read them earlier in this transaction
    (run_cycle's snapshot does); read here when not given. Changed rows are compared again once locked.
    """
    by_id = {p.job_id: p for p in pending}
    etas = etas or {}
    if stored is None:
        # All waiting jobs, not `pk__in` ten thousand ids: PostgreSQL finds them faster by status (indexed).
        stored = Job.objects.waiting().values_list(*POSITION_COLUMNS)
    # A cycle's ETAs fall on a few dozen instants (the ends its replay steps through): each is made a
    # datetime once, not three times for each of ten thousand jobs.
    when = functools.cache(_when)
    changed = []
    for row in stored:
        item = by_id.get(row[0])
        if item is not None and not _unchanged(item, etas, row, when):
            changed.append(row[0])
    if not changed:
        return 0
    locked = (
        Job.objects.filter(pk__in=changed, status__in=WAITING)
        .select_for_update(no_key=True, skip_locked=True)
        .values_list(*POSITION_COLUMNS)
    )
    rows, events = [], []
    for row in locked:
        item = by_id[row[0]]
        values = _position(item, etas, row, when)
        if values == row[1:]:
            continue
        rows.append((row[0], *values))
        if row[2] != item.reason:
            events.append(
                JobEvent(job_id=row[0], kind=EventKind.SCHEDULING, reason=Reason.WAITING, message=item.reason)
            )
    for first in range(0, len(rows), _WRITE_CHUNK):
        _positions_write(rows[first : first + _WRITE_CHUNK])
    JobEvent.objects.bulk_create(events)
    return len(rows)


def _position(
    item: Pending, etas: Mapping[str, Eta], stored: _Stored, when: Callable[[float | None], datetime | None]
) -> _Stored:
    """The values `_POSITION_FIELDS` should hold for `item`, given the `stored` row (id first): its ETA
    stays as stored when `etas` has none for it. `when`: `_when`, or the same memoized."""
    estimate = etas.get(item.job_id)
    times = stored[4:8]
    if estimate is not None:
        times = (when(estimate.start), when(estimate.low), when(estimate.high), estimate.reason)
    return (item.position, item.reason, Reason.WAITING, *times)


def _unchanged(
    item: Pending, etas: Mapping[str, Eta], stored: _Stored, when: Callable[[float | None], datetime | None]
) -> bool:
    """Whether the `stored` row already holds `_position(item, etas, stored, when)`: the same test, field by
    field and cheapest first, without building the row (ten thousand times a cycle)."""
    if stored[1] != item.position or stored[2] != item.reason or stored[3] != Reason.WAITING:
        return False
    estimate = etas.get(item.job_id)
    return estimate is None or (
        stored[7] == estimate.reason
        and stored[4] == when(estimate.start)
        and stored[5] == when(estimate.low)
        and stored[6] == when(estimate.high)
    )


def _positions_write(rows: Sequence[_Stored]) -> None:
    """One `UPDATE ... FROM (VALUES ...)` for `rows` (id, then `_POSITION_FIELDS`), rows locked already.

    Why not `bulk_update`: it builds a CASE expression per column that grows with the rows, and PostgreSQL
    takes minutes over one of ten thousand rows (each row searches every case); a VALUES list is joined on
    the primary key instead."""
    meta, quote = Job._meta, connection.ops.quote_name
    column = {field.name: field.column for field in meta.concrete_fields if field.column}
    columns = [quote(column[name]) for name in POSITION_COLUMNS]
    types = ("varchar", *(kind for _, kind in _POSITION_FIELDS))
    first = "(" + ", ".join(f"%s::{kind}" for kind in types) + ")"
    other = "(" + ", ".join("%s" for _ in types) + ")"
    table, key = quote(meta.db_table), columns[0]
    assignments = ", ".join(f"{c} = v.{c}" for c in columns[1:])
    values = ", ".join([first, *[other] * (len(rows) - 1)])
    # Only quoted names from the model and placeholders go into the text; every value is a parameter.
    sql = f"UPDATE {table} SET {assignments} FROM (VALUES {values}) AS v({', '.join(columns)})"  # noqa: S608
    sql += f" WHERE {table}.{key} = v.{key}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])
