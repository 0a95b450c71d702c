"""REST API for jobs (`/api/v1/jobs/`): thin views over the selectors and services.

Bodies may be JSON (`{"tenant": "demo", "spec": {...} or "yaml text"}`) or a raw YAML/JSON spec with
`?tenant=demo`; the tenant may be left out by a user who belongs to exactly one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.http import Http404
from rest_framework import status
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusterio.errors import ClusterError
from jobs import cluster
from jobs.models import Job
from jobs.selectors import job_events, job_get, job_list, job_logs, job_metrics
from jobs.serializers import (
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    LogLineSerializer,
    MetricSampleSerializer,
)
from jobs.services import JobRejected, job_cancel, job_retry, job_submit
from jobs.states import JobStatus
from portal.apiutil import api_user
from portal.pagination import paginate
from tenants.models import Tenant
from tenants.scoping import Perm, tenants_for


class TextParser(BaseParser):
    """Hands a YAML (or plain text) body to the spec parser untouched."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            return str(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError("the body is not UTF-8 text") from exc


def rejected(exc: JobRejected) -> Response:
    """A refused submission or action as a 4xx with field errors."""
    message = "; ".join(m for msgs in exc.errors.values() for m in msgs)
    return Response({"detail": message, "errors": exc.errors}, status=exc.status)


def _job(request: Request, job_id: str) -> Job:
    try:
        return job_get(user=api_user(request), job_id=job_id)
    except Job.DoesNotExist as exc:
        raise Http404("no such job") from exc


def _int(request: Request, name: str, default: int | None, low: int = 0, high: int = 100000) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValidationError({name: [f"must be a whole number, got {raw!r}"]}) from exc
    if not low <= value <= high:
        raise ValidationError({name: [f"must be between {low} and {high}"]})
    return value


def _submit_tenant(request: Request, named: str | None) -> Tenant:
    allowed = tenants_for(request.user, Perm.SUBMIT)
    if named:
        tenant = allowed.filter(slug=named).first()
        if tenant is None:
            raise ValidationError({"tenant": [f"no tenant {named!r} you may submit to"]})
        return tenant
    choices = list(allowed[:2])
    if len(choices) != 1:
        raise ValidationError({"tenant": ["name the tenant (you may submit to several, or none)"]})
    return choices[0]


class JobListView(APIView):
    """GET: the jobs you may see (filters: tenant, status, owner, search). POST: submit a job."""

    parser_classes = [JSONParser, TextParser]

    def get(self, request: Request) -> Response:
        params = request.query_params
        if params.get("status") and params["status"] not in JobStatus.values:
            raise ValidationError({"status": [f"unknown status; use one of {', '.join(JobStatus.values)}"]})
        jobs = job_list(
            user=api_user(request), status=params.get("status") or None, search=params.get("search")
        )
        if params.get("tenant"):
            jobs = jobs.filter(tenant__slug=params["tenant"])
        if params.get("owner"):
            owner = request.user.get_username() if params["owner"] == "me" else params["owner"]
            jobs = jobs.filter(owner__username=owner)
        return paginate(request, jobs, JobSerializer)

    def post(self, request: Request) -> Response:
        data = request.data
        if isinstance(data, dict) and "spec" in data:
            unknown = set(data) - {"tenant", "spec"}
            if unknown:
                raise ValidationError({key: ["unknown field; send 'tenant' and 'spec'"] for key in unknown})
            tenant = _submit_tenant(request, data.get("tenant") or request.query_params.get("tenant"))
            document = data["spec"]
        else:
            tenant = _submit_tenant(request, request.query_params.get("tenant"))
            document = data
        if not isinstance(document, str | dict):
            raise ValidationError({"spec": ["must be a YAML/JSON text or an object"]})
        try:
            job = job_submit(tenant=tenant, user=api_user(request), document=document)
        except JobRejected as exc:
            return rejected(exc)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


class JobDetailView(APIView):
    def get(self, request: Request, job_id: str) -> Response:
        return Response(JobDetailSerializer(_job(request, job_id)).data)


class JobCancelView(APIView):
    def post(self, request: Request, job_id: str) -> Response:
        try:
            job = job_cancel(job=_job(request, job_id), user=api_user(request))
        except JobRejected as exc:
            return rejected(exc)
        return Response(JobDetailSerializer(job).data)


class JobRetryView(APIView):
    def post(self, request: Request, job_id: str) -> Response:
        try:
            job = job_retry(job=_job(request, job_id), user=api_user(request))
        except JobRejected as exc:
            return rejected(exc)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


class JobEventsView(APIView):
    def get(self, request: Request, job_id: str) -> Response:
        events = job_events(job=_job(request, job_id))
        return Response(JobEventSerializer(events, many=True).data)


class JobLogsView(APIView):
    """Log lines by sequence: `?learner=0&after=SEQ&limit=N` to page forward, `?tail=N` for the end."""

    def get(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        lines = job_logs(
            job=job,
            learner=_int(request, "learner", None, 0, 1024),
            after=_int(request, "after", 0, 0, 2**62) or 0,
            limit=_int(request, "limit", 1000, 1, 10000) or 1000,
            tail=_int(request, "tail", None, 1, 10000),
        )
        last = lines[-1].seq if lines else _int(request, "after", 0, 0, 2**62)
        return Response({"lines": LogLineSerializer(lines, many=True).data, "last_seq": last})


class JobMetricsView(APIView):
    def get(self, request: Request, job_id: str) -> Response:
        samples = job_metrics(job=_job(request, job_id), name=request.query_params.get("name"))
        return Response(MetricSampleSerializer(samples, many=True).data)


class ClusterView(APIView):
    """GET: the cluster's nodes and their free capacity (503 when the cluster cannot be reached)."""

    def get(self, request: Request) -> Response:
        try:
            nodes = cluster.nodes()
        except ClusterError as exc:
            return Response(
                {"detail": f"cluster unreachable: {exc}", "errors": {}},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response(
            {
                "nodes": [
                    {
                        "name": n.name,
                        "ready": n.ready,
                        "gpu_type": n.gpu_type,
                        "allocatable": asdict(n.allocatable),
                        "free": asdict(n.free),
                    }
                    for n in nodes
                ]
            }
        )
