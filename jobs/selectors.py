"""Reads of jobs, always through the tenant scoping helper."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import F, QuerySet
from django.utils import timezone

from jobs.core.choices import EventKind, JobStatus, Reason
from jobs.models import Job, JobEvent, LogLine, MetricSample, ResultFile
from tenants.models import Tenant
from tenants.scoping import Perm, restrict

AnyUser = User | AnonymousUser


def job_list(
    *,
    user: AnyUser,
    tenant: Tenant | None = None,
    owner: User | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first, optionally of one tenant and one owner (the lists' filters,
    jobs/filters.py, narrow this further)."""
    jobs = restrict(Job.objects.select_related("tenant", "owner"), user, Perm.VIEW)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if owner is not None:
        jobs = jobs.filter(owner=owner)
    return jobs


def job_get(*, user: AnyUser, job_id: str) -> Job:
    """One job the user may see; raises Job.DoesNotExist for a job of another tenant, exactly as for none
    (and for an id PostgreSQL could not even compare, such as one with a NUL byte)."""
    if "\x00" in job_id:
        raise Job.DoesNotExist(job_id)
    return job_list(user=user).get(pk=job_id)


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """A job's events in order (the caller already got `job` through job_get)."""
    return job.events.all()


def job_logs(
    *, job: Job, learner: int | None = None, after: int = 0, limit: int = 1000, tail: int | None = None
) -> list[LogLine]:
    """Log lines in sequence order: after a sequence number (backfill), or the last `tail` lines."""
    lines = job.log_lines.all()
    if learner is not None:
        lines = lines.filter(learner=learner)
    if tail is not None:
        newest = list(lines.order_by("-ts", "-learner", "-seq")[:tail])
        return newest[::-1]
    return list(lines.filter(seq__gt=after).order_by("learner", "seq")[:limit])


LogRow = tuple[int, int, int, datetime, str]
"""A log line as (learner, attempt, seq, ts, text)."""


def job_log_rows(
    *, job: Job, learner: int | None = None, after: int = 0, limit: int = 1000, tail: int | None = None
) -> list[LogRow]:
    """`job_logs` as plain tuples, for the logs API: a page of thousands of lines without a model instance
    (and a serializer field call) per line."""
    lines = job.log_lines.all()
    if learner is not None:
        lines = lines.filter(learner=learner)
    fields = ("learner", "attempt", "seq", "ts", "text")
    if tail is not None:
        newest = list(lines.order_by("-ts", "-learner", "-seq").values_list(*fields)[:tail])
        return newest[::-1]
    return list(lines.filter(seq__gt=after).order_by("learner", "seq").values_list(*fields)[:limit])


def job_metrics(*, job: Job, name: str | None = None, limit: int = 10000) -> list[MetricSample]:
    """A job's metric points, oldest first, optionally of one metric (those from TensorBoard event files,
    log_seq 0, by step)."""
    samples = job.metric_samples.all()
    if name:
        samples = samples.filter(name=name)
    return list(samples.order_by("name", "log_seq", "step", "pk")[:limit])


def tenant_gpu_hours_by_day(*, tenant: Tenant, days: int = 14) -> list[tuple[date, float]]:
    """GPU-hours the tenant's jobs used per day (UTC) over the last `days` days, oldest first: each job's
    run time (started → finished, or now) within the day, times learners times GPUs per learner."""
    now = timezone.now()
    today = now.date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=now.tzinfo)
    hours = {first + timedelta(days=i): 0.0 for i in range(days)}
    jobs = tenant.jobs.filter(started_at__isnull=False, gpus__gt=0).exclude(finished_at__lt=start)
    for began, ended, gpus in jobs.values_list("started_at", "finished_at", F("learners") * F("gpus")):
        began, ended = max(began, start), min(ended or now, now)
        while began < ended:
            next_day = datetime.combine(
                began.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo
            )
            part = min(ended, next_day) - began
            hours[began.date()] += gpus * part.total_seconds() / 3600
            began = next_day
    return sorted(hours.items())


def job_results(*, job: Job, attempt: int | None = None) -> QuerySet[ResultFile]:
    """The result files of one attempt of a job the caller got through job_get: the given attempt, or the
    latest one that uploaded any (an earlier attempt's files stay listed under their own attempt)."""
    files = ResultFile.objects.filter(job=job)
    if attempt is None:
        attempt = files.order_by("-attempt").values_list("attempt", flat=True).first()
    return files.filter(attempt=attempt or 0).order_by("learner", "path")


def job_log_slice(
    *, job: Job, offset: int = 0, limit: int = 10, tail: int | None = None, since: datetime | None = None
) -> list[tuple[int, tuple[int, int, int, datetime | None, str]]]:
    """A slice of a job's whole log in one order (learner, then sequence), each line with its index from 1:
    `limit` lines from `offset`, or the last `tail` ones; only lines seen at or after `since` if given (for
    FfDL's `loglines`, which pages by line position)."""
    lines = job.log_lines.all()
    if since is not None:
        lines = lines.filter(ts__gte=since)
    rows = lines.order_by("learner", "seq").values_list("learner", "attempt", "seq", "ts", "text")
    if tail is not None:
        offset = max(lines.count() - tail, 0)
        limit = min(limit, tail)
    return [(offset + 1 + n, row) for n, row in enumerate(rows[offset : offset + limit])]


def tenant_namespace_not_owned(*, tenant: Tenant) -> bool:
    """Whether the tenant's jobs wait because its namespace exists and is not this installation's (their
    launch met `NamespaceNotOwned`): a platform admin must resolve it (another prefix, or labels)."""
    return tenant.jobs.waiting().filter(reason=Reason.NAMESPACE_NOT_OWNED).exists()


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job as its transitions tell it: when it was admitted and started, and, when it was
    stopped on purpose (a halt, the platform's idle-GPU halt, a cancel), how (`halted`, `cancelled`)."""

    number: int
    admitted_at: datetime
    started_at: datetime | None = None
    stopped: str = ""


def job_attempts(*, job: Job) -> dict[int, Attempt]:
    """The job's attempts by number, from its transition events (each admission, a move to `starting`, opens
    one): the job page shows the current attempt's times and says which learners were stopped, not failed."""
    attempts: dict[int, Attempt] = {}
    current: Attempt | None = None
    moves = job.events.filter(kind=EventKind.TRANSITION).order_by("created_at", "id")
    for to, at in moves.values_list("to_status", "created_at"):
        if to == JobStatus.STARTING:
            current = Attempt(number=len(attempts) + 1, admitted_at=at)
        elif current is None:
            continue
        elif to == JobStatus.RUNNING and current.started_at is None:
            current = replace(current, started_at=at)
        elif to in _STOPPED_BY and not current.stopped:
            current = replace(current, stopped=_STOPPED_BY[to])
        else:
            continue
        attempts[current.number] = current
    return attempts


_STOPPED_BY: dict[str, str] = {JobStatus.HALTING: "halted", JobStatus.CANCELLING: "cancelled"}
