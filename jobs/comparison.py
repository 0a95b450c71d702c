"""Reads for comparing runs: the last and best value of chosen metrics for a page of jobs (one query per
page, whatever its length), and a comparison of a few jobs the user may see (their
hyperparameters, final metrics and downsampled curves), with its CSV export.

Every job comes through `job_list` (the tenant scoping helper): an id the user may not see is refused
exactly like one that does not exist.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from jobs.core.compare import DEFAULT_POINTS, MetricChoice, Mode, best_mode, differing, metric_family
from jobs.models import Job
from jobs.selectors import AnyUser, job_list, job_metric_buckets


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one job: its latest value (and that point's step) and its best value."""

    last: float | None
    step: int | None
    best: float | None
    mode: Mode


def duration_seconds(job: Job) -> float | None:
    """How long the job has run: started → finished, or → now while it runs; None before it starts."""
    if job.started_at is None:
        return None
    return ((job.finished_at or timezone.now()) - job.started_at).total_seconds()


_SUMMARY_SQL = """
SELECT ids.job_id, names.name, latest.value, latest.step,
       (SELECT min(s.value) FROM jobs_metricsample s WHERE s.job_id = ids.job_id AND s.name = names.name),
       (SELECT max(s.value) FROM jobs_metricsample s WHERE s.job_id = ids.job_id AND s.name = names.name)
FROM unnest(%(ids)s::text[]) AS ids(job_id)
CROSS JOIN unnest(%(names)s::text[]) AS names(name)
JOIN LATERAL (
    SELECT s.value, s.step FROM jobs_metricsample s
    WHERE s.job_id = ids.job_id AND s.name = names.name
    ORDER BY s.log_seq DESC, s.learner
    LIMIT 1
) AS latest ON TRUE
"""


def metric_summaries(
    *, job_ids: Sequence[str], choices: Sequence[MetricChoice]
) -> dict[str, dict[str, MetricSummary]]:
    """job id → metric name → summary, for the chosen metrics of the given jobs (a job without a metric
    has no entry for it). One query whatever the number of jobs, and whatever their length: for each job
    and metric the latest point (the last log line that reported it: one backward step of the
    (job, name, log_seq) index) and the min and max aggregates, which PostgreSQL answers from the ends of
    the (job, name, value) index, so a metric of a million points costs what one of ten does."""
    names = [choice.name for choice in choices]
    if not job_ids or not names:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_SUMMARY_SQL, {"ids": list(job_ids), "names": names})
        rows = cursor.fetchall()
    modes = {choice.name: choice.mode for choice in choices}
    result: dict[str, dict[str, MetricSummary]] = {}
    for job_id, name, value, step, low, high in rows:
        mode = modes[name]
        result.setdefault(job_id, {})[name] = MetricSummary(
            last=value, step=step, best=low if mode == "min" else high, mode=mode
        )
    return result


@dataclass
class Series:
    """One metric of one job as a chart draws it: the lowest-numbered learner that reported it, over its
    whole step range in at most `max_points` step buckets (each bucket's last step, latest time, mean,
    min and max: `jobs.selectors.job_metric_buckets`)."""

    job_id: str
    name: str
    variant: str
    total: int
    step: list[int] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    min: list[float] = field(default_factory=list)
    max: list[float] = field(default_factory=list)


@dataclass
class Comparison:
    """Several jobs side by side, in the order asked for."""

    jobs: list[Job]
    hyperparameters: list[tuple[str, list[Any], bool]]
    metrics: list[tuple[str, Mode]]
    summaries: dict[str, dict[str, MetricSummary]]
    charts: list[tuple[str, list[Series]]]
    max_points: int


def _series(jobs: Sequence[Job], max_points: int) -> dict[tuple[str, str], Series]:
    """Each job's metric curves in step buckets computed in PostgreSQL (only the buckets leave the
    database, and a spike stays in its bucket's max); time is seconds since the job's first point, so
    runs started on different days overlay."""
    found: dict[tuple[str, str], Series] = {}
    for job in jobs:
        mine: list[Series] = []
        bucketed_all = job_metric_buckets(job=job, buckets=max_points)
        for bucketed in bucketed_all:  # by name, then learner
            if (job.pk, bucketed.name) in found:
                continue  # a later learner of a metric already charted
            series = Series(
                job_id=job.pk,
                name=bucketed.name,
                variant=metric_family(bucketed.name)[1],
                total=bucketed.points,
                step=bucketed.step,
                time=[float("nan") if t is None else t for t in bucketed.time],
                value=bucketed.mean,
                min=bucketed.min,
                max=bucketed.max,
            )
            found[(job.pk, bucketed.name)] = series
            mine.append(series)
        start = min((b.first_time for b in bucketed_all if b.first_time is not None), default=0.0)
        for series in mine:
            series.time = [round(t - start, 3) if t == t else 0.0 for t in series.time]
    return found


def job_compare(*, user: AnyUser, job_ids: Sequence[str], max_points: int = DEFAULT_POINTS) -> Comparison:
    """The jobs `job_ids` side by side; raises Job.DoesNotExist (naming the first id) when any of them is
    not a job the user may see. Hyperparameters are the union of the jobs' (None where a job has none of
    that name), each marked when the jobs differ in it; metrics are every metric any of them reported."""
    jobs = {job.pk: job for job in job_list(user=user).filter(pk__in=list(job_ids))}
    missing = [job_id for job_id in job_ids if job_id not in jobs]
    if missing:
        raise Job.DoesNotExist(missing[0])
    ordered = [jobs[job_id] for job_id in job_ids]
    names: list[str] = []
    for job in ordered:
        for name in (job.spec or {}).get("hyperparameters") or {}:
            if name not in names:
                names.append(name)
    hyperparameters = []
    for name in sorted(names, key=str.casefold):
        values = [((job.spec or {}).get("hyperparameters") or {}).get(name) for job in ordered]
        hyperparameters.append((name, values, differing(values)))
    series = _series(ordered, max_points)
    metric_names = sorted({name for _, name in series}, key=str.casefold)
    choices = [MetricChoice(name, best_mode(name)) for name in metric_names]
    charts: dict[str, list[Series]] = {}
    for name in metric_names:
        base = metric_family(name)[0]
        charts.setdefault(base, []).extend(
            series[(job_id, name)] for job_id in job_ids if (job_id, name) in series
        )
    return Comparison(
        jobs=ordered,
        hyperparameters=hyperparameters,
        metrics=[(choice.name, choice.mode) for choice in choices],
        summaries=metric_summaries(job_ids=job_ids, choices=choices),
        charts=sorted(charts.items(), key=lambda item: item[0].casefold()),
        max_points=max_points,
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def comparison_rows(comparison: Comparison) -> Iterable[list[str]]:
    """The comparison as a table: a header, then one row per job (its labels, status and duration, each
    hyperparameter, each metric's last and best value)."""
    yield [
        "id", "name", "experiment", "tags", "status", "duration_seconds",
        *[f"hp.{name}" for name, _, _ in comparison.hyperparameters],
        *[f"{name}.{part}" for name, _ in comparison.metrics for part in ("last", "best")],
    ]  # fmt: skip
    for index, job in enumerate(comparison.jobs):
        duration = duration_seconds(job)
        summaries = comparison.summaries.get(job.pk, {})
        metrics = []
        for name, _ in comparison.metrics:
            summary = summaries.get(name)
            metrics += [_cell(summary.last), _cell(summary.best)] if summary else ["", ""]
        yield [
            job.pk, job.name, job.experiment, " ".join(job.tags), job.status,
            "" if duration is None else f"{duration:.0f}",
            *[_cell(values[index]) for _, values, _ in comparison.hyperparameters],
            *metrics,
        ]  # fmt: skip


def comparison_csv(comparison: Comparison) -> str:
    """`comparison_rows` as CSV text (RFC 4180, CRLF line ends as the csv module writes them). A cell that
    a spreadsheet would run as a formula (=, +, -, @ first) is prefixed with a quote."""
    out = io.StringIO()
    writer = csv.writer(out)
    for row in comparison_rows(comparison):
        writer.writerow([_safe(cell) for cell in row])
    return out.getvalue()


def _safe(cell: str) -> str:
    if cell[:1] in ("=", "+", "@") or (cell[:1] == "-" and not _is_number(cell)):
        return "'" + cell
    return cell


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
