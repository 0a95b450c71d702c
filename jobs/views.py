"""The job pages: the jobs list, the submit editor (with dry run), a job's page with its live parts, the
cancel, halt, resume and retry buttons, and the log download. Thin views over the scoping helper, the selectors and the
services; another tenant's job answers 404 exactly like one that does not exist."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from jobs import cluster
from jobs.cluster import ClusterError, NodeInfo
from jobs.compare_pages import metric_columns
from jobs.core.choices import EventKind
from jobs.core.states import TRANSITIONS, JobStatus
from jobs.filters import JobPageFilter
from jobs.forms import SubmitForm, spec_templates, template_code, template_code_folders
from jobs.idlegpu import job_idle_flag
from jobs.models import Job, Learner
from jobs.scheduling import job_dry_run
from jobs.selectors import (
    Attempt,
    job_attempts,
    job_events,
    job_get,
    job_list,
    job_logs,
    job_result_refusals,
    job_results,
)
from jobs.services import (
    JobRejected,
    PermissionDenied,
    job_cancel,
    job_halt,
    job_resume,
    job_retry,
    job_submit,
)
from tenants.pages import current_tenant, forbidden, page_user, render_page
from tenants.scoping import Perm, can_manage_owned, has_perm, tenants_for

JOBS_PER_PAGE = 25
JOBS_PER_PAGE_CHOICES = (25, 50, 100)
LOG_PAGE = 5000


def cluster_nodes() -> tuple[list[NodeInfo] | None, str]:
    """The cluster's nodes, or None and why when the cluster cannot be reached (pages still render)."""
    try:
        return cluster.nodes(), ""
    except ClusterError as exc:
        return None, str(exc)


def _job_or_404(request: HttpRequest, job_id: str) -> Job:
    try:
        return job_get(user=request.user, job_id=job_id)
    except Job.DoesNotExist as exc:
        raise Http404("no such job") from exc


@require_GET
@login_required
def jobs_page(request: HttpRequest) -> HttpResponse:
    """The current tenant's jobs with filters (status, owner, name) and pages."""
    tenant = current_tenant(request)
    filters = JobPageFilter(request.GET, queryset=job_list(user=request.user, tenant=tenant), request=request)
    jobs = filters.qs if filters.is_valid() else filters.queryset
    per_page = _per_page(request.GET.get("per_page"))
    page = Paginator(jobs if tenant else Job.objects.none(), per_page).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": filters.form,
        "page": page,
        "query": query.urlencode(),
        "per_page": per_page,
        "per_page_choices": JOBS_PER_PAGE_CHOICES,
    }
    return render_page(request, "portal/jobs.html", context | metric_columns(request, list(page.object_list)))


def _per_page(value: str | None) -> int:
    """Jobs per page of the list: one of the choices, else the default (a bad value is no reason to fail)."""
    try:
        number = int(value or JOBS_PER_PAGE)
    except ValueError:
        return JOBS_PER_PAGE
    return number if number in JOBS_PER_PAGE_CHOICES else JOBS_PER_PAGE


def _read_code(upload: Any) -> Any:
    """The uploaded code ZIP (a file, read by the service a piece at a time), refusing one over
    CODE_MAX_BYTES."""
    if upload.size > settings.CODE_MAX_BYTES:
        limit = settings.CODE_MAX_BYTES
        raise JobRejected({"code": [f"the code archive is {upload.size} bytes; at most {limit}"]})
    return upload


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    """The YAML editor: submit a job, or dry-run it; errors come back inline and the text is kept."""
    user = page_user(request)
    allowed = tenants_for(user, Perm.SUBMIT)
    templates = spec_templates()
    tenant = current_tenant(request)
    initial: dict[str, Any] = {"tenant": tenant if tenant and allowed.filter(pk=tenant.pk).exists() else None}
    chosen = request.POST.get("template") or request.GET.get("template", "pytorch")
    initial["template"] = chosen
    clone_of = None
    if request.GET.get("clone"):
        clone_of = _job_or_404(request, request.GET["clone"])
        labels = {"experiment": clone_of.experiment, "tags": list(clone_of.tags)}
        # The user's own text, unless the labels were changed since: then the normalized spec with them.
        relabelled = any(clone_of.spec.get(name, default) != value for (name, value), default in
                         zip(labels.items(), ("", []), strict=True))  # fmt: skip
        text = clone_of.document if clone_of.document and not relabelled else ""
        text = text or yaml.safe_dump(clone_of.spec | labels, sort_keys=False)
        initial |= {"tenant": clone_of.tenant, "spec": text, "template": ""}
        chosen = ""
    elif chosen in templates:
        initial["spec"] = templates[chosen][1]
    form = SubmitForm(request.POST or None, request.FILES or None, tenants=allowed, initial=initial)
    errors: dict[str, list[str]] = {}
    dry_run = None
    if request.method == "POST":
        if not allowed.exists():
            return forbidden(request, "You may not submit jobs in any of your tenants.")
        if form.is_valid():
            target, document = form.cleaned_data["tenant"], form.cleaned_data["spec"]
            try:
                if "dry_run" in request.POST:
                    dry_run = job_dry_run(tenant=target, user=user, document=document, nodes=cluster_nodes())
                else:
                    upload = form.cleaned_data.get("code")
                    code = _read_code(upload) if upload is not None else None
                    attached = template_code(form.cleaned_data["template"]) if code is None else None
                    if attached is not None:
                        code = attached[1]
                    job = job_submit(tenant=target, user=user, document=document, code=code)
                    shipped = f" with the template's code ({attached[0]})" if attached else ""
                    messages.success(request, f"Job {job.name} ({job.pk}) submitted{shipped}.")
                    return redirect("job-detail", job_id=job.pk)
            except PermissionDenied as exc:
                return forbidden(request, str(exc))
            except JobRejected as exc:
                errors = exc.errors
        else:
            errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
    return render_page(
        request,
        "portal/job_new.html",
        {
            "form": form,
            "can_submit": allowed.exists(),
            "templates": templates,
            "template_texts": {key: text for key, (_, text) in templates.items()},
            "template_codes": template_code_folders(),
            "chosen_code": template_code_folders().get(form["template"].value() or ""),
            "chosen": chosen,
            "clone_of": clone_of,
            "errors": sorted(errors.items()),
            "dry_run": dry_run,
        },
        status=400 if errors else 200,
    )


JOB_PARTS = (
    "timeline", "learners", "times", "results", "borrowed", "resources", "info", "reason", "tuning",
    "telemetry", "gpu", "actions",
)  # fmt: skip
"""The parts of the job page that change with its state: `portal/_job_<part>.html`, re-rendered live."""


RESULTS_PER_PAGE = 50
"""Result files shown per page on the job page (`?results_page=N`), as the API pages them."""


def _learners(job: Job, attempts: dict[int, Attempt]) -> list[Learner]:
    """The learner rows, newest attempt first; a learner whose attempt was halted or cancelled is shown as
    stopped (its SIGTERM exit is the stop, not a failure)."""
    learners = list(job.learner_set.order_by("-attempt", "index"))
    for learner in learners:
        attempt = attempts.get(learner.attempt)
        stopped = attempt.stopped if attempt and learner.phase in ("Failed", "Deleted") else ""
        learner.shown_phase = "Stopped" if stopped else learner.phase  # type: ignore[attr-defined]
        learner.shown_reason = stopped or learner.reason  # type: ignore[attr-defined]
    return learners


def _job_history(request: HttpRequest, job: Job) -> dict[str, Any]:
    attempts = job_attempts(job=job)
    return {
        "job": job,
        "events": job_events(job=job),
        "learners": _learners(job, attempts),
        "current_attempt": attempts.get(job.attempt),
        "results": Paginator(job_results(job=job), RESULTS_PER_PAGE).get_page(
            request.GET.get("results_page")
        ),
        "refused_results": job_result_refusals(job=job)[:5],
        "tuning_events": job_events(job=job).filter(kind=EventKind.TUNING),
        "hyperparameters": sorted(((job.spec or {}).get("hyperparameters") or {}).items()),
        "gpu_latest": job.telemetry.filter(gpu_util__isnull=False).order_by("-ts").first()
        if job.gpus
        else None,
        "gpu_exposed": cluster.gpu_metrics_exposed(),
        "idle_gpu": job_idle_flag(job),
        "can_manage": can_manage_owned(request.user, job),
        "halt_states": [
            s for s, moves in TRANSITIONS.items() if moves & {JobStatus.HALTING, JobStatus.HALTED}
        ],
    }


def _results_query(request: HttpRequest) -> str:
    """The page of result files being looked at, for the live re-render to keep showing it."""
    page = request.GET.get("results_page", "")
    return f"?results_page={page}" if page.isdigit() and page.isascii() else ""


@require_GET
@login_required
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """One job: status, events, learners, resources, actions, logs and metric charts."""
    job = _job_or_404(request, job_id)
    indexes = sorted(
        set(range(job.learners)) | set(job.log_lines.values_list("learner", flat=True).distinct())
    )
    live = {
        "job": job.pk,
        "learners": indexes,
        "terminal": job.is_terminal,
        "parts": reverse("job-parts", args=[job.pk]) + _results_query(request),
        "tensorboard": (job.spec.get("evaluation_metrics") or {}).get("type") == "tensorboard",
    }
    return render_page(
        request,
        "portal/job_detail.html",
        _job_history(request, job)
        | {
            "learner_indexes": indexes,
            "live": live,
            "has_event_files": job.event_files.exists(),
            "can_relabel": has_perm(request.user, job.tenant, Perm.SUBMIT),
        },
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def job_parts(request: HttpRequest, job_id: str) -> HttpResponse:
    """The job page's timeline, learner rows, times, results, borrowed chip and action buttons, re-rendered
    from the page's own templates (so both always agree) when a state change arrives over the WebSocket.
    htmx gets one fragment that swaps each part in out of band (the actions only for those who may act);
    any other client gets the parts as HTML strings in JSON, with the status."""
    job = _job_or_404(request, job_id)
    context = _job_history(request, job)
    if request.headers.get("HX-Request"):
        return HttpResponse(render_to_string("portal/_job_parts.html", context, request))
    names = [name for name in JOB_PARTS if name != "actions" or context["can_manage"]]
    parts = {name: render_to_string(f"portal/_job_{name}.html", context, request) for name in names}
    return JsonResponse({"status": job.status, **parts})


def _job_action(request: HttpRequest, job_id: str, action: str) -> HttpResponse:
    job = _job_or_404(request, job_id)
    try:
        if action in ("cancel", "halt", "resume"):
            service = {"cancel": job_cancel, "halt": job_halt, "resume": job_resume}[action]
            job = service(job=job, user=page_user(request))
            messages.success(request, f"Job {job.pk} is {job.status}.")
        else:
            job = job_retry(job=job, user=page_user(request))
            messages.success(request, f"Submitted {job.pk} as a retry.")
    except PermissionDenied as exc:
        return forbidden(request, str(exc))
    except JobRejected as exc:
        messages.error(request, str(exc))
    return redirect("job-detail", job_id=job.pk)


@require_POST
@login_required
def job_cancel_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """Cancel a job (the service checks the permission again; 403 page otherwise)."""
    return _job_action(request, job_id, "cancel")


@require_POST
@login_required
def job_halt_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """Halt a job to resume it later from its checkpoint (the service checks the permission again)."""
    return _job_action(request, job_id, "halt")


@require_POST
@login_required
def job_resume_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """Send a halted job back to the queue (the service checks the permission again)."""
    return _job_action(request, job_id, "resume")


@require_POST
@login_required
def job_retry_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """Submit a finished job again (the service checks the permission again; 403 page otherwise)."""
    return _job_action(request, job_id, "retry")


def _log_text(job: Job, learners: list[int]) -> Iterator[str]:
    for learner in learners:
        after = 0
        while True:
            lines = job_logs(job=job, learner=learner, after=after, limit=LOG_PAGE)
            for line in lines:
                yield f"[learner {learner}] {line.text}\n"
            if len(lines) < LOG_PAGE:
                break
            after = lines[-1].seq


@require_GET
@login_required
def job_log_download(request: HttpRequest, job_id: str) -> StreamingHttpResponse:
    """The whole log of a job as plain text, learner by learner, streamed page by page."""
    job = _job_or_404(request, job_id)
    learners = sorted(set(job.log_lines.values_list("learner", flat=True).distinct()))
    response = StreamingHttpResponse(_log_text(job, learners), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{job.pk}.log.txt"'
    return response
