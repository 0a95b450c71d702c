"""REST API for a job's artifacts: its result files (list, one file, all as a ZIP) and its code ZIP.

Scoped like every job endpoint: another tenant's job is a 404 (jobs.api._job → selectors.job_get).
"""

from __future__ import annotations

import zipfile
from typing import Any

from django.http import FileResponse, Http404, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, errors
from common.pagination import PageSerializer, paginate
from jobs.api import JOB_ID, _job
from jobs.artifacts.pod_views import clean_result_path
from jobs.artifacts.storage import artifact_storage
from jobs.filters import ResultQuery, query_params
from jobs.models import ResultFile
from jobs.selectors import job_results


class ResultFileSerializer(serializers.ModelSerializer[ResultFile]):
    class Meta:
        model = ResultFile
        fields = ["attempt", "learner", "path", "size", "sha256", "created_at"]


class ResultPageSerializer(PageSerializer):
    """A page of a job's result files."""

    results = ResultFileSerializer(many=True)


PAGE = OpenApiParameter(
    "page", OpenApiTypes.INT, OpenApiParameter.QUERY, required=False, description="Page number, from 1."
)
PAGE_SIZE = OpenApiParameter(
    "page_size",
    OpenApiTypes.INT,
    OpenApiParameter.QUERY,
    required=False,
    description="Files per page (default 50, at most 500).",
)
ATTEMPT = OpenApiParameter(
    "attempt", OpenApiTypes.INT, OpenApiParameter.QUERY, required=False,
    description="Which attempt's results (default: the latest that uploaded any).",
)  # fmt: skip
LEARNER = OpenApiParameter(
    "learner",
    OpenApiTypes.INT,
    OpenApiParameter.QUERY,
    required=False,
    description="Which learner (default 0).",
)


def zip_name(result: ResultFile) -> str:
    """A file's name inside the all-results ZIP: learner 0's at the top, other learners' in folders."""
    return result.path if result.learner == 0 else f"learner-{result.learner}/{result.path}"


class JobResultsView(ApiView):
    """GET: the result files of the job's latest attempt that uploaded any (or `?attempt=`), a page at a time
    (by learner, then path)."""

    @extend_schema(
        operation_id="jobs_results_list",
        parameters=[JOB_ID, ATTEMPT, PAGE, PAGE_SIZE],
        responses={200: ResultPageSerializer, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = _job(request, job_id)
        files = job_results(job=job, attempt=query_params(request, ResultQuery).get("attempt"))
        return paginate(request, files, ResultPageSerializer)


class JobResultFileView(ApiView):
    """GET: one result file's bytes."""

    @extend_schema(
        parameters=[JOB_ID, ATTEMPT, LEARNER],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str, path: str) -> HttpResponseBase:
        relative = clean_result_path(path)
        job = _job(request, job_id)
        query = query_params(request, ResultQuery)
        files = job_results(job=job, attempt=query.get("attempt"))
        found = files.filter(path=relative, learner=query["learner"]).first()
        if relative is None or found is None:
            raise Http404("no such result file")
        response = FileResponse(
            artifact_storage().open(found.storage_name, "rb"),
            as_attachment=True,
            filename=relative.rsplit("/", 1)[-1],
            content_type="application/octet-stream",
        )
        response["X-Trainyard-Sha256"] = found.sha256
        return response


class _Buffer:
    """A write-only file for zipfile that hands each written piece to the streaming response."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.offset = 0

    def write(self, data: bytes) -> int:
        self.pieces.append(bytes(data))
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        return None

    def take(self) -> bytes:
        data, self.pieces = b"".join(self.pieces), []
        return data


def _zip_stream(files: list[ResultFile]) -> Any:
    buffer = _Buffer()
    storage = artifact_storage()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:  # type: ignore[call-overload]
        for result in files:
            with (
                storage.open(result.storage_name, "rb") as source,
                archive.open(zip_name(result), "w") as target,
            ):
                while chunk := source.read(1 << 20):
                    target.write(chunk)
                    yield buffer.take()
        yield buffer.take()
    yield buffer.take()


class JobResultsZipView(ApiView):
    """GET: every result file of the attempt in one ZIP, streamed."""

    @extend_schema(
        parameters=[JOB_ID, ATTEMPT],
        responses={(200, "application/zip"): OpenApiTypes.BINARY, **errors(400, 401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> HttpResponseBase:
        job = _job(request, job_id)
        files = list(job_results(job=job, attempt=query_params(request, ResultQuery).get("attempt")))
        if not files:
            raise Http404("the job has no result files")
        response = StreamingHttpResponse(_zip_stream(files), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{job.pk}-results.zip"'
        return response


class JobCodeView(ApiView):
    """GET: the code ZIP the job was submitted with."""

    @extend_schema(
        parameters=[JOB_ID],
        responses={(200, "application/zip"): OpenApiTypes.BINARY, **errors(401, 404, 429)},
    )
    def get(self, request: Request, job_id: str) -> HttpResponseBase:
        job = _job(request, job_id)
        if job.code is None:
            raise Http404("the job was submitted without code")
        response = FileResponse(
            artifact_storage().open(job.code.storage_name, "rb"),
            as_attachment=True,
            filename=f"{job.pk}-code.zip",
            content_type="application/zip",
        )
        response["X-Trainyard-Sha256"] = job.code.sha256
        return response
