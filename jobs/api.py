"""REST API for jobs (`/api/v1/jobs/`): thin views over the selectors and services.

Bodies may be JSON (`{"tenant": "demo", "spec": {...} or "yaml text"}`) or a raw YAML/JSON spec with
`?tenant=demo`; the tenant may be left out by a user who belongs to exactly one.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from common.api import ApiView, ServiceUnavailable, api_user, errors
from common.pagination import PageSerializer, paginate
from common.parsers import BoundedJSONParser, TextParser
from jobs import cluster
from jobs.cluster import ClusterError
from jobs.comparison import metric_summaries
from jobs.core.choices import EventKind
from jobs.core.compare import MetricChoice
from jobs.core.states import JobStatus
from jobs.filters import (
    ListMetricsQuery,
    LogQuery,
    MetricQuery,
    SubmitQuery,
    TelemetryQuery,
    filtered_jobs,
    metric_cursor,
    query_params,
)
from jobs.models import Job, TelemetrySample
from jobs.selectors import (
    MetricKey,
    job_events,
    job_get,
    job_list,
    job_log_rows,
    job_metric_buckets,
    job_metric_page,
)
from jobs.serializers import (
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    LogLineSerializer,
    MetricSampleSerializer,
    MetricSeriesSerializer,
)
from jobs.services import job_cancel, job_delete, job_halt, job_relabel, job_resume, job_retry, job_submit
from jobs.telemetry import telemetry_list
from tenants.models import Tenant, TokenScope
from tenants.scoping import Perm, tenants_for


def _job(request: Request, job_id: str) -> Job:
    if "\x00" in job_id:  # PostgreSQL text cannot hold NUL: no job has such an id (and the query would fail)
        raise Http404("no such job")
    try:
        return job_get(user=api_user(request), job_id=job_id)
    except Job.DoesNotExist as exc:
        raise Http404("no such job") from exc


def _query_tenant(request: Request) -> str | None:
    """The `?tenant=` a submission may name its tenant with."""
    return query_params(request, SubmitQuery).get("tenant")


def _submit_tenant(request: Request, named: object) -> Tenant:
    allowed = tenants_for(request.user, Perm.SUBMIT)
    if named and (not isinstance(named, str) or "\x00" in named):
        raise ValidationError({"tenant": ["must be a tenant's slug"]})
    if named:
        tenant = allowed.filter(slug=named).first()
        if tenant is None:
            raise ValidationError({"tenant": [f"no tenant {named!r} you may submit to"]})
        return tenant
    choices = list(allowed[:2])
    if len(choices) != 1:
        raise ValidationError({"tenant": ["name the tenant (you may submit to several, or none)"]})
    return choices[0]


@extend_schema_field(
    {
        "oneOf": [
            {"type": "object", "additionalProperties": True, "description": "The spec as an object."},
            {"type": "string", "description": "The spec as YAML or JSON text."},
        ]
    }
)
class SpecField(serializers.JSONField):
    pass


class JobSubmitSerializer(serializers.Serializer):
    tenant = serializers.SlugField(
        required=False, help_text="The tenant to submit to; may be left out if you may submit to one only."
    )
    spec = SpecField(help_text="The job spec (/spec/, docs/spec.md), as an object or as YAML/JSON text.")


class JobPageSerializer(PageSerializer):
    """A page of the jobs list."""

    results = JobSerializer(many=True)


class LogPageSerializer(serializers.Serializer):
    """A page of log lines, with the sequence number to page on from."""

    lines = LogLineSerializer(many=True)
    last_seq = serializers.IntegerField(
        help_text="The sequence number of the last line; pass it as `after` for the next page."
    )


class NodeResourcesSerializer(serializers.Serializer):
    """An amount of GPUs, CPU (millicores) and memory (MiB)."""

    gpus = serializers.IntegerField()
    cpu_millis = serializers.IntegerField()
    memory_mib = serializers.IntegerField()


class NodeSerializer(serializers.Serializer):
    """A node as the scheduler sees it: readiness, GPU type, allocatable and free room."""

    name = serializers.CharField()
    ready = serializers.BooleanField()
    gpu_type = serializers.CharField(allow_null=True)
    allocatable = NodeResourcesSerializer()
    free = NodeResourcesSerializer(help_text="May be negative on an over-committed node.")


class ClusterSerializer(serializers.Serializer):
    """The cluster's nodes, each with its allocatable and free room."""

    nodes = NodeSerializer(many=True)


JOB_ID = OpenApiParameter("job_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="The job's id.")


def _query(name: str, kind: Any, description: str, **extra: Any) -> OpenApiParameter:
    return OpenApiParameter(
        name, kind, OpenApiParameter.QUERY, required=False, description=description, **extra
    )


class JobSubmitFormSerializer(serializers.Serializer[Any]):
    """A submission as a form, for a job that carries its code (docs/artifacts.md)."""

    spec = serializers.CharField(help_text="The spec as YAML/JSON text (or send it as a file part).")
    tenant = serializers.CharField(required=False)
    code = serializers.FileField(
        required=False, help_text="A ZIP of the model definition, unpacked into MODEL_DIR."
    )


class JobListView(ApiView):
    """GET: the jobs you may see (filters: tenant, status, owner, search). POST: submit a job."""

    parser_classes = [BoundedJSONParser, MultiPartParser, TextParser]
    token_scopes = {"POST": TokenScope.SUBMIT}  # submitting is a job write

    @extend_schema(
        operation_id="jobs_list",
        parameters=[
            _query("tenant", OpenApiTypes.STR, "Only this tenant's jobs (its slug)."),
            _query("status", OpenApiTypes.STR, "Only jobs in this status.", enum=JobStatus.values),
            _query("owner", OpenApiTypes.STR, "Only this user's jobs; `me` for yours."),
            _query("search", OpenApiTypes.STR, "Only jobs whose name contains this (any case)."),
            _query("experiment", OpenApiTypes.STR, "Only runs of this experiment."),
            _query("tag", OpenApiTypes.STR, "Only jobs with this tag (`a,b`: with both)."),
            _query(
                "metrics",
                OpenApiTypes.STR,
                "Metrics whose last and best value each job carries in `metrics`: `loss,accuracy`; best is "
                "the lowest for names with loss, error or perplexity, else the highest, or say `loss:min`.",
            ),
            _query("page", OpenApiTypes.INT, "Page number, from 1."),
            _query("page_size", OpenApiTypes.INT, "Jobs per page (default 50, at most 500)."),
        ],
        responses={200: JobPageSerializer, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request) -> Response:
        chosen = query_params(request, ListMetricsQuery).get("metrics")
        jobs = filtered_jobs(request, job_list(user=api_user(request)))
        prepare = (lambda page: with_metric_columns(page, chosen)) if chosen is not None else None
        return paginate(request, jobs, JobPageSerializer, prepare=prepare)

    @extend_schema(
        parameters=[
            _query("tenant", OpenApiTypes.STR, "The tenant, when the body is the bare spec (or names none).")
        ],
        request={
            "application/json": JobSubmitSerializer,
            "application/yaml": OpenApiTypes.STR,
            "text/yaml": OpenApiTypes.STR,
            "multipart/form-data": JobSubmitFormSerializer,
        },
        responses={201: JobDetailSerializer, **errors(400, 401, 403, 429)},
        description=(
            "Submit a job: JSON `{tenant, spec}`, or the bare spec as YAML text with `?tenant=`. The spec's "
            "fields: [/spec/](/spec/) in the portal, `docs/spec.md`, and `GET /api/v1/spec/schema/`."
        ),
        examples=[
            OpenApiExample(
                "JSON",
                value={
                    "tenant": "demo",
                    "spec": {
                        "name": "mnist",
                        "image": "pytorch/pytorch:2.3",
                        "command": ["python", "train.py"],
                    },
                },
                media_type="application/json",
                request_only=True,
            ),
            OpenApiExample(
                "Form",
                value={
                    "tenant": "demo",
                    "spec": "name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n",
                },
                media_type="multipart/form-data",
                request_only=True,
            ),
            OpenApiExample(
                "YAML",
                value="name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\nresources: {gpus: 1}\n",
                media_type="text/yaml",
                request_only=True,
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/"):
            return self._post_multipart(request)
        data = request.data
        if isinstance(data, dict) and "spec" in data:
            unknown = set(data) - {"tenant", "spec"}
            if unknown:
                raise ValidationError({key: ["unknown field; send 'tenant' and 'spec'"] for key in unknown})
            tenant = _submit_tenant(request, data.get("tenant") or _query_tenant(request))
            document = data["spec"]
        else:
            tenant = _submit_tenant(request, _query_tenant(request))
            document = data
        if not isinstance(document, str | dict):
            raise ValidationError({"spec": ["must be a YAML/JSON text or an object"]})
        job = job_submit(tenant=tenant, user=api_user(request), document=document)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    def _post_multipart(self, request: Request) -> Response:
        """A form with `spec` (text or a file), optional `tenant`, and optional `code` (a ZIP file)."""
        unknown = (set(request.data) | set(request.FILES)) - {"tenant", "spec", "code"}
        if unknown:
            raise ValidationError({k: ["unknown field; send 'spec', 'code' and 'tenant'"] for k in unknown})
        spec_file, code_file = request.FILES.get("spec"), request.FILES.get("code")
        form: Any = request.data
        document: Any = spec_file.read() if spec_file is not None else form.get("spec")
        if not document:
            raise ValidationError({"spec": ["required: the job spec, as a form field or a file"]})
        if code_file is not None and code_file.size > settings.CODE_MAX_BYTES:
            limit = settings.CODE_MAX_BYTES
            raise ValidationError({"code": [f"the code archive is {code_file.size} bytes; at most {limit}"]})
        tenant = _submit_tenant(request, form.get("tenant") or _query_tenant(request))
        job = job_submit(tenant=tenant, user=api_user(request), document=document, code=code_file)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


def with_metric_columns(jobs: list[Job], chosen: list[MetricChoice]) -> None:
    """Give each job of a page the last and best value of the chosen metrics (one query for the page)."""
    found = metric_summaries(job_ids=[job.pk for job in jobs], choices=chosen)
    for job in jobs:
        job.metric_columns = chosen  # type: ignore[attr-defined]
        job.metric_summaries = found.get(job.pk, {})  # type: ignore[attr-defined]


class JobLabelsSerializer(serializers.Serializer):
    """What a PATCH of a job may change: its experiment and its tags (either or both)."""

    experiment = serializers.JSONField(
        required=False, help_text="One line, at most 100 characters; '' for none."
    )
    tags = serializers.JSONField(
        required=False, help_text="A list of short labels (at most 20), deduplicated; [] for none."
    )


class JobDetailView(ApiView):
    parser_classes = [BoundedJSONParser]
    token_scopes = {"PATCH": TokenScope.SUBMIT, "DELETE": TokenScope.SUBMIT}  # labels and deletion

    @extend_schema(parameters=[JOB_ID], responses={200: JobDetailSerializer, **errors(401, 404, 429)})
    def get(self, request: Request, job_id: str) -> Response:
        return Response(JobDetailSerializer(_job(request, job_id)).data)

    @extend_schema(
        parameters=[JOB_ID],
        request=JobLabelsSerializer,
        responses={200: JobDetailSerializer, **errors(400, 401, 403, 404, 429)},
        description="Change a job's experiment and tags (members of its tenant may; recorded as an event).",
    )
    def patch(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        data = request.data
        if not isinstance(data, dict):
            raise ValidationError({"": ["send a JSON object with experiment and/or tags"]})
        unknown = set(data) - {"experiment", "tags"}
        if unknown:
            raise ValidationError(
                {key: ["cannot be changed; send experiment and/or tags"] for key in unknown}
            )
        if not data:
            raise ValidationError({"": ["send experiment and/or tags"]})
        job = job_relabel(job=job, user=api_user(request), **data)
        return Response(JobDetailSerializer(job).data)

    @extend_schema(
        parameters=[JOB_ID],
        responses={204: None, **errors(401, 403, 404, 409, 429, 503)},
        description="Delete a finished job with its logs, metrics, result files and checkpoints.",
    )
    def delete(self, request: Request, job_id: str) -> Response:
        job_delete(job=_job(request, job_id), user=api_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobCancelView(ApiView):
    token_scopes = {"POST": TokenScope.SUBMIT}  # a job write: submit tokens may

    @extend_schema(
        parameters=[JOB_ID],
        request=None,
        responses={200: JobDetailSerializer, **errors(401, 403, 404, 409, 429)},
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_cancel(job=_job(request, job_id), user=api_user(request))
        return Response(JobDetailSerializer(job).data)


class JobHaltView(ApiView):
    token_scopes = {"POST": TokenScope.SUBMIT}  # a job write: submit tokens may

    @extend_schema(
        parameters=[JOB_ID],
        request=None,
        responses={200: JobDetailSerializer, **errors(401, 403, 404, 409, 429)},
        description=(
            "Stop a job gracefully, to resume it later from its checkpoint: a queued job is halted at once, "
            "a running one is `halting` until its pods are gone (its checkpoint is kept, its quota freed)."
        ),
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_halt(job=_job(request, job_id), user=api_user(request))
        return Response(JobDetailSerializer(job).data)


class JobResumeView(ApiView):
    token_scopes = {"POST": TokenScope.SUBMIT}  # a job write: submit tokens may

    @extend_schema(
        parameters=[JOB_ID],
        request=None,
        responses={200: JobDetailSerializer, **errors(401, 403, 404, 409, 429)},
        description="Send a halted job back to the queue; it goes on from its checkpoint, using no retry.",
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_resume(job=_job(request, job_id), user=api_user(request))
        return Response(JobDetailSerializer(job).data)


class JobRetryView(ApiView):
    token_scopes = {"POST": TokenScope.SUBMIT}  # a job write: submit tokens may

    @extend_schema(
        parameters=[JOB_ID],
        request=None,
        responses={201: JobDetailSerializer, **errors(401, 403, 404, 409, 429)},
        description="Submit a finished job again, as a new job.",
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_retry(job=_job(request, job_id), user=api_user(request))
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


class JobEventsView(ApiView):
    @extend_schema(
        parameters=[JOB_ID], responses={200: JobEventSerializer(many=True), **errors(401, 404, 429)}
    )
    def get(self, request: Request, job_id: str) -> Response:
        events = job_events(job=_job(request, job_id))
        return Response(JobEventSerializer(events, many=True).data)


def _iso(value: datetime | None) -> str | None:
    """A time as DRF's DateTimeField writes it in UTC: ISO 8601 with "Z" (None stays None)."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


class JobLogsView(ApiView):
    """Log lines by sequence: `?learner=0&after=SEQ&limit=N` to page forward, `?tail=N` for the end."""

    @extend_schema(
        parameters=[
            JOB_ID,
            _query("learner", OpenApiTypes.INT, "Only this learner's lines (0-1024)."),
            _query("after", OpenApiTypes.INT, "Lines after this sequence number (default 0)."),
            _query("limit", OpenApiTypes.INT, "At most this many lines (1-10000, default 1000)."),
            _query("tail", OpenApiTypes.INT, "The last N lines instead (1-10000)."),
        ],
        responses={200: LogPageSerializer, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        query = query_params(request, LogQuery)
        rows = job_log_rows(job=job, **query)
        # What LogPageSerializer gives, built directly: a page holds up to 10,000 lines.
        lines = [
            {"learner": learner, "attempt": attempt, "seq": seq, "ts": _iso(ts), "text": text}
            for learner, attempt, seq, ts, text in rows
        ]
        last = rows[-1][2] if rows else query["after"]
        return Response({"lines": lines, "last_seq": last})


class MetricPageSerializer(serializers.Serializer):
    """A page of metric points in (name, step, id) order, with links to the pages either side."""

    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null on the first.")
    results = MetricSampleSerializer(many=True)


class MetricSeriesSetSerializer(serializers.Serializer):
    """Every series asked for (one per metric and learner), each cut into at most `buckets` buckets."""

    buckets = serializers.IntegerField(help_text="The most buckets each series has (as asked).")
    series = MetricSeriesSerializer(many=True)


METRICS_RESPONSE = PolymorphicProxySerializer(
    component_name="MetricsResponse",
    serializers=[MetricPageSerializer, MetricSeriesSetSerializer],
    resource_type_field_name=None,
)


class JobMetricsView(ApiView):
    """A job's metric points a page at a time, by name, then step (a point without a step at its log
    line's sequence number, where the charts draw it), then id; or with `?buckets=N` each series
    downsampled for a chart: per step bucket its min, max and mean (docs/jobs.md, "Reading metrics")."""

    @extend_schema(
        operation_id="jobs_metrics_list",
        parameters=[
            JOB_ID,
            _query("name", OpenApiTypes.STR, "Only this metric (e.g. loss)."),
            _query("cursor", OpenApiTypes.STR, "Where a page starts: from a `next` or `previous` link."),
            _query("page_size", OpenApiTypes.INT, "Points per page (1-10000, default 1000)."),
            _query(
                "buckets",
                OpenApiTypes.INT,
                "Instead of points: each series (metric and learner) over its whole step range in at most "
                "this many buckets of equal width, each with its min, max, mean and count (1-5000).",
            ),
        ],
        responses={200: METRICS_RESPONSE, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        query = query_params(request, MetricQuery)
        if "buckets" in query:
            found = job_metric_buckets(job=job, buckets=query["buckets"], name=query.get("name"))
            return Response({"buckets": query["buckets"], "series": [asdict(series) for series in found]})
        direction, key = query.get("cursor", ("a", None))
        backward = direction == "b"
        page = job_metric_page(
            job=job,
            name=query.get("name"),
            after=None if backward else key,
            before=key if backward else None,
            size=query["page_size"],
        )
        url = request.build_absolute_uri()
        more_after = page.more if not backward else key is not None
        more_before = page.more if backward else key is not None

        def link(way: str, edge: MetricKey) -> str:
            return str(replace_query_param(url, "cursor", metric_cursor(way, edge)))

        # What MetricPageSerializer gives, built directly: a page holds up to 10,000 points.
        for row in page.rows:
            row["ts"] = _iso(row["ts"])
        return Response(
            {
                "next": link("a", page.last) if more_after and page.last else None,
                "previous": link("b", page.first) if more_before and page.first else None,
                "results": page.rows,
            }
        )


class ClusterView(ApiView):
    """GET: the cluster's nodes and their free capacity (503 when the cluster cannot be reached)."""

    @extend_schema(responses={200: ClusterSerializer, **errors(401, 429, 503)})
    def get(self, request: Request) -> Response:
        try:
            nodes = cluster.nodes()
        except ClusterError as exc:
            raise ServiceUnavailable(f"cluster unreachable: {exc}") from exc
        return Response(ClusterSerializer({"nodes": nodes}).data)


class TelemetrySampleSerializer(serializers.ModelSerializer):
    """One recorded sample of a learner's use, limits and speed."""

    class Meta:
        model = TelemetrySample
        fields = [
            "ts", "attempt", "learner", "cpu_millis_used", "cpu_millis_limit", "memory_mib_used",
            "memory_mib_limit", "samples_per_sec", "steps_per_sec", "gpu_util",
        ]  # fmt: skip


class TelemetryPageSerializer(serializers.Serializer):
    """A job's telemetry samples with the tuner's decisions, which the samples explain."""

    samples = TelemetrySampleSerializer(many=True)
    decisions = JobEventSerializer(many=True, help_text="The tuner's decisions (events of kind tuning).")


class JobTelemetryView(ApiView):
    """Per-learner CPU/memory use, limits and speed the platform recorded, and the tuner's decisions."""

    @extend_schema(
        parameters=[
            JOB_ID,
            _query("attempt", OpenApiTypes.INT, "Only this attempt's samples."),
            _query("limit", OpenApiTypes.INT, "The newest N samples (1-10000, default 2000)."),
        ],
        responses={200: TelemetryPageSerializer, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        samples = telemetry_list(job=job, **query_params(request, TelemetryQuery))
        decisions = job_events(job=job).filter(kind=EventKind.TUNING)
        return Response(TelemetryPageSerializer({"samples": samples, "decisions": decisions}).data)
