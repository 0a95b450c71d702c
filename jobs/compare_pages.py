"""The pages for comparing runs: the jobs list's metric columns, the comparison page (curves overlaid, the
hyperparameter table with differing values marked, final metrics, CSV download), and the job page's form
that changes a job's experiment and tags. Thin views over `jobs.comparison` and `job_relabel`."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from jobs.compare_api import comparison_data
from jobs.comparison import Comparison, duration_seconds, job_compare, metric_summaries
from jobs.core.compare import (
    DEFAULT_POINTS,
    format_duration,
    format_number,
    parse_job_ids,
    parse_metric_choices,
)
from jobs.models import Job
from jobs.selectors import job_get
from jobs.services import JobRejected, PermissionDenied, job_relabel
from tenants.pages import forbidden, page_user, render_page


def metric_columns(request: HttpRequest, jobs: list[Job]) -> dict[str, Any]:
    """The jobs page's extra columns for its rows: each job's duration, and the last and best value of the
    metrics named in `?metrics=` (one query for the page); a bad `metrics` is shown, not refused."""
    text = request.GET.get("metrics", "")
    try:
        chosen = parse_metric_choices(text) if "\x00" not in text else []
        problem = ""
    except ValueError as exc:
        chosen, problem = [], str(exc)
    found = metric_summaries(job_ids=[job.pk for job in jobs], choices=chosen)
    for job in jobs:
        job.duration_text = format_duration(duration_seconds(job))  # type: ignore[attr-defined]
        summaries = found.get(job.pk, {})
        job.metric_cells = [  # type: ignore[attr-defined]
            (format_number(s.last), format_number(s.best)) if (s := summaries.get(c.name)) else ("", "")
            for c in chosen
        ]
    return {"metric_choices": chosen, "metrics_text": text, "metrics_problem": problem}


def _table(comparison: Comparison) -> dict[str, Any]:
    ids = [job.pk for job in comparison.jobs]
    return {
        "jobs": [(job, format_duration(duration_seconds(job))) for job in comparison.jobs],
        "hyperparameters": [
            (name, ["—" if v is None else _text(v) for v in values], differs)
            for name, values, differs in comparison.hyperparameters
        ],
        "metrics": [
            (
                name,
                mode,
                [
                    (format_number(s.last), format_number(s.best))
                    if (s := comparison.summaries.get(i, {}).get(name))
                    else ("", "")
                    for i in ids
                ],
            )
            for name, mode in comparison.metrics
        ],
    }


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@require_GET
@login_required
def jobs_compare_page(request: HttpRequest) -> HttpResponse:
    """`/jobs/compare/?ids=a&ids=b` (or `ids=a,b`): a chart per metric with a series per job, the
    hyperparameters and final metrics; another tenant's job is a 404 as on every page."""
    try:
        ids = parse_job_ids(request.GET.getlist("ids"))
    except ValueError as exc:
        return render_page(request, "portal/compare.html", {"problem": str(exc)}, status=400)
    try:
        comparison = job_compare(user=request.user, job_ids=ids, max_points=DEFAULT_POINTS)
    except Job.DoesNotExist as exc:
        raise Http404("no such job") from exc
    csv_url = reverse("api-jobs-compare") + "?ids=" + ",".join(ids) + "&format=csv"
    context = _table(comparison) | {"data": comparison_data(comparison), "csv_url": csv_url, "ids": ids}
    return render_page(request, "portal/compare.html", context)


@require_POST
@login_required
def job_labels_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """Change a job's experiment and tags from its page (members of its tenant; the service checks)."""
    try:
        job = job_get(user=request.user, job_id=job_id)
    except Job.DoesNotExist as exc:
        raise Http404("no such job") from exc
    try:
        job_relabel(
            job=job,
            user=page_user(request),
            experiment=request.POST.get("experiment", ""),
            tags=request.POST.get("tags", ""),
        )
        messages.success(request, "Labels saved.")
    except PermissionDenied as exc:
        return forbidden(request, str(exc))
    except JobRejected as exc:
        messages.error(request, f"Labels not saved: {exc}")
    return redirect("job-detail", job_id=job.pk)
