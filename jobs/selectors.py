"""Reads of jobs, always through the tenant scoping helper."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
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


def job_latest_metrics(*, job: Job) -> list[MetricSample]:
    """The latest point of each of a job's metrics (by log order): FfDL's model view. One index scan per
    metric name, however many points the job has."""
    return list(job.metric_samples.order_by("name", "-log_seq", "-pk").distinct("name"))


def job_metric_points(*, job: Job, since: datetime | None = None) -> Iterator[MetricSample]:
    """Every metric point of a job (from `since`, when given), per learner in log order, read in chunks:
    FfDL's metrics view. The REST API pages with `job_metric_page` and charts with `job_metric_buckets`."""
    samples = job.metric_samples.all()
    if since is not None:
        samples = samples.filter(ts__gte=since)
    return samples.order_by("learner", "log_seq", "name", "pk").iterator(chunk_size=5000)


@dataclass(frozen=True)
class MetricKey:
    """A point's place in the metrics API's order: its metric's name, its x (the step, or for a point
    without one its log line's sequence, as the charts place it) and its id (which breaks ties between
    learners and attempts that reported the same step)."""

    name: str
    x: int
    id: int


@dataclass
class MetricPage:
    """One page of points (as the API renders them) and the keys of its ends; `more` says whether points
    lie beyond the page in the direction it was read."""

    rows: list[dict[str, Any]]
    first: MetricKey | None
    last: MetricKey | None
    more: bool


_X = "COALESCE(step, log_seq)"  # the expression of the index metric_job_name_x (jobs/models.py)


def job_metric_page(
    *,
    job: Job,
    name: str | None = None,
    after: MetricKey | None = None,
    before: MetricKey | None = None,
    size: int = 1000,
) -> MetricPage:
    """`size` points of a job (one metric's with `name`) in (name, x, id) order: the first ones, those
    after `after`, or the last ones before `before`. A keyset read: each page is one descent of the index
    metric_job_name_x, however deep it lies, and a point inserted meanwhile never shifts the pages (no
    point is shown twice or skipped for it)."""
    where = ["job_id = %(job)s"]
    params: dict[str, Any] = {"job": job.pk, "size": size + 1}
    if name is not None:
        where.append("name = %(name)s")
        params["name"] = name
    edge = after or before
    if edge is not None:
        where.append(f"(name, {_X}, id) {'<' if before else '>'} (%(k_name)s, %(k_x)s, %(k_id)s)")
        params.update(k_name=edge.name, k_x=edge.x, k_id=edge.id)
    direction = "DESC" if before else "ASC"
    sql = (
        f"SELECT name, learner, attempt, step, value, ts, log_seq, {_X}, id FROM jobs_metricsample "  # noqa: S608 (constant fragments; values are parameters)
        f"WHERE {' AND '.join(where)} "
        f"ORDER BY name {direction}, {_X} {direction}, id {direction} LIMIT %(size)s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    more = len(found) > size
    found = found[:size]
    if before:
        found.reverse()
    rows = [
        {"name": n, "learner": learner, "attempt": attempt, "step": step, "value": value, "ts": ts,
         "log_seq": seq}
        for n, learner, attempt, step, value, ts, seq, _, _ in found
    ]  # fmt: skip
    keys = [MetricKey(row[0], row[7], row[8]) for row in (found[:1] + found[-1:])]
    return MetricPage(rows=rows, first=keys[0] if keys else None, last=keys[-1] if keys else None, more=more)


@dataclass
class MetricSeries:
    """One metric of one learner, downsampled: per step bucket its last x and latest time (epoch seconds),
    its lowest, highest and mean value and its number of points (parallel lists, bucket order; empty
    buckets left out). `first_step`..`last_step` is the range of x the buckets divide: the metric's whole
    range, the same for each learner's series of it, so the learners' buckets line up; `first_time` is the
    time of its earliest point (Unix seconds; None if none has a time)."""

    name: str
    learner: int
    points: int
    first_step: int
    last_step: int
    first_time: float | None
    step: list[int] = field(default_factory=list)
    time: list[float | None] = field(default_factory=list)
    min: list[float] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    count: list[int] = field(default_factory=list)


# Each metric's x range from both ends of the index metric_job_name_x (the job's metric names found by a
# loose index scan), cut into buckets of equal width; then per bucket one range scan of that index,
# aggregated per learner. (One GROUP BY over the computed bucket was 3-4 times slower: PostgreSQL cannot
# tell it has few groups, so it sorts the million rows instead of hashing them.) Each bucket's rows are
# asked for in x order, which only metric_job_name_x gives without a sort, and the query runs with sorts
# discouraged (enable_sort off; the few thousand result rows are still sorted): so the planner stays on
# that index even with the statistics of a near-empty table, under which any index on job_id looked as
# cheap and each bucket became a scan of the job's every point.
_ALL_NAMES = """
    (SELECT name FROM jobs_metricsample WHERE job_id = %(job)s ORDER BY name LIMIT 1)
    UNION ALL
    SELECT (SELECT s.name FROM jobs_metricsample s
            WHERE s.job_id = %(job)s AND s.name > names.name ORDER BY s.name LIMIT 1)
    FROM names WHERE names.name IS NOT NULL
"""
_ONE_NAME = "SELECT %(name)s::text"
_BUCKETS_SETTINGS = (
    "SET LOCAL jit = off",  # compiling the plan cost more than the whole query saved
    "SET LOCAL enable_sort = off",  # each bucket read in the index's order (below)
)
_BUCKETS_SQL = """
WITH RECURSIVE names(name) AS ({names}), bounds AS MATERIALIZED (
    SELECT names.name,
        (SELECT COALESCE(step, log_seq) FROM jobs_metricsample s
         WHERE s.job_id = %(job)s AND s.name = names.name
         ORDER BY COALESCE(step, log_seq), id LIMIT 1) AS lo,
        (SELECT COALESCE(step, log_seq) FROM jobs_metricsample s
         WHERE s.job_id = %(job)s AND s.name = names.name
         ORDER BY COALESCE(step, log_seq) DESC, id DESC LIMIT 1) AS hi
    FROM names WHERE names.name IS NOT NULL
), edges AS (
    SELECT name, lo, hi, i,
        lo + FLOOR((hi::numeric - lo + 1) * i / %(buckets)s)::bigint AS x0,
        lo + FLOOR((hi::numeric - lo + 1) * (i + 1) / %(buckets)s)::bigint AS x1
    FROM bounds, generate_series(0, %(buckets)s - 1) AS i
    WHERE lo IS NOT NULL
)
SELECT e.name, a.learner, e.i, e.lo, e.hi, a.x, a.n, a.low, a.high, a.mean, a.epoch, a.first
FROM edges e CROSS JOIN LATERAL (
    SELECT s.learner, MAX(s.x) AS x, COUNT(*) AS n, MIN(s.value) AS low, MAX(s.value) AS high,
        AVG(s.value) AS mean, EXTRACT(EPOCH FROM MAX(s.ts))::float8 AS epoch,
        EXTRACT(EPOCH FROM MIN(s.ts))::float8 AS first
    FROM (
        SELECT learner, value, ts, COALESCE(step, log_seq) AS x FROM jobs_metricsample
        WHERE job_id = %(job)s AND name = e.name
            AND COALESCE(step, log_seq) >= e.x0 AND COALESCE(step, log_seq) < e.x1
        ORDER BY COALESCE(step, log_seq)
    ) AS s
    GROUP BY s.learner
) AS a
WHERE e.x1 > e.x0
ORDER BY e.name, a.learner, e.i
"""


def job_metric_buckets(*, job: Job, buckets: int, name: str | None = None) -> list[MetricSeries]:
    """Every metric of a job (or the one named), one series per learner that reported it, cut into at
    most `buckets` buckets of equal step width over the metric's whole range, each bucket's min, max and
    mean computed in PostgreSQL: a chart of a million-point run gets every spike and dip of it in a few
    thousand numbers (as W&B draws long runs), and only those leave the database."""
    sql = _BUCKETS_SQL.replace("{names}", _ALL_NAMES if name is None else _ONE_NAME)
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in _BUCKETS_SETTINGS:
            cursor.execute(setting)
        cursor.execute(sql, {"job": job.pk, "buckets": buckets, "name": name})
        rows = cursor.fetchall()
    found: dict[tuple[str, int], MetricSeries] = {}
    for metric, learner, _, lo, hi, x, count, low, high, mean, epoch, first in rows:
        series = found.get((metric, learner))
        if series is None:
            series = found[(metric, learner)] = MetricSeries(metric, learner, 0, lo, hi, first)
        series.points += count
        series.step.append(x)
        series.time.append(epoch)
        series.min.append(low)
        series.max.append(high)
        series.mean.append(mean)
        series.count.append(count)
    return list(found.values())


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


def job_result_refusals(*, job: Job) -> QuerySet[JobEvent]:
    """The job's reports of result files the platform refused (too large, past a cap), latest attempt's
    first: what the job page warns about."""
    return job.events.filter(reason=Reason.RESULTS_REFUSED).order_by("-created_at")


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
