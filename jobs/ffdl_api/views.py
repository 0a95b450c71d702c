"""The FfDL API's views (FfDL's swagger operations: postModel, listModels, getModel, patchModel,
deleteModel, downloadModelDefinition, downloadTrainedModel, getLogs, getMetrics, getLoglines): each parses
FfDL's parameters, calls one Trainyard selector or service, and renders FfDL's shapes."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, Http404, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework import status as http
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user
from common.api import exception_handler as trainyard_exception_handler
from common.errors import Refused
from common.parsers import BoundedJSONParser
from jobs.api import _job
from jobs.artifacts.api import _zip_stream
from jobs.artifacts.storage import artifact_storage
from jobs.core.choices import JobStatus
from jobs.core.states import ACTIVE, TERMINAL, WAITING
from jobs.ffdl_api.auth import BasicTokenAuthentication, named_tenant, submit_tenant
from jobs.ffdl_api.render import API_PREFIX, ffdl_error, millis, model
from jobs.models import Job
from jobs.selectors import (
    job_latest_metrics,
    job_list,
    job_log_rows,
    job_log_slice,
    job_metric_points,
    job_results,
)
from jobs.services import job_cancel, job_delete, job_halt, job_resume, job_submit
from tenants.models import TokenScope
from tenants.scoping import Perm
from tenants.tokens import BearerTokenAuthentication

VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")
FOLLOW_POLL_SECONDS = 1.0
"""How often a followed log looks for new lines (server side, while the job runs)."""
FOLLOW_MAX_SECONDS = 24 * 3600
"""A followed log ends after this long even if the job has not (FfDL's own limit was 80 hours)."""
DEFAULT_LOG_PAGE = 10
"""FfDL's `defaultLogPageSize` for loglines."""
MAX_LOG_PAGE = 10000


def ffdl_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Trainyard's handler, its answer reshaped into FfDL's `Error` (code, error, description) plus the
    per-field messages under `errors`."""
    response = trainyard_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data if isinstance(response.data, dict) else {}
    response.data = ffdl_error(response.status_code, str(data.get("detail", "")), data.get("errors") or {})
    return response


class FfdlView(ApiView):
    """The base of the FfDL views: bearer or basic-with-token auth, FfDL's error shape, and FfDL's
    `version` query parameter (optional here; when sent it must be a YYYY-MM-DD date). Left out of
    Trainyard's OpenAPI schema: FfDL's own swagger.yml describes these endpoints."""

    authentication_classes = [BearerTokenAuthentication, BasicTokenAuthentication]
    parser_classes = [BoundedJSONParser]
    schema = None
    # FfDL's writes are all job writes: submit a model (a job), halt or resume it, delete it.
    token_scopes = {"POST": TokenScope.SUBMIT, "PATCH": TokenScope.SUBMIT, "DELETE": TokenScope.SUBMIT}

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return ffdl_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        version = request.query_params.get("version")
        if version is not None and not VERSION.fullmatch(version):
            raise ValidationError({"version": ["must be a date, YYYY-MM-DD (FfDL's API version)"]})


def _ffdl_job(request: Request, model_id: str) -> Job:
    try:
        return _job(request, model_id)
    except Http404 as exc:
        raise Http404(f"model {model_id!r} not found") from exc


class ModelsView(FfdlView):
    """`/v1/models`: GET lists the models you may see; POST trains a new one from a manifest and a ZIP."""

    parser_classes = [MultiPartParser]

    def get(self, request: Request) -> Response:
        user = api_user(request)
        jobs = job_list(user=user, tenant=named_tenant(request, user, Perm.VIEW))
        return Response({"models": [model(job) for job in jobs]})

    def post(self, request: Request) -> Response:
        user = api_user(request)
        parts = set(request.data) | set(request.FILES)
        unknown = parts - {"manifest", "model_definition"}
        if unknown:
            raise ValidationError(
                {k: ["unknown part; send 'manifest' and 'model_definition'"] for k in unknown}
            )
        manifest_file = request.FILES.get("manifest")
        form: Any = request.data
        manifest: Any = manifest_file.read() if manifest_file is not None else form.get("manifest")
        if not manifest:
            raise ValidationError({"manifest": ["required: the manifest (manifest.yml) as a file part"]})
        code_file = request.FILES.get("model_definition")
        if code_file is None and form.get("model_definition"):
            raise ValidationError({"model_definition": ["must be a file part: the model code as a ZIP"]})
        if code_file is not None and code_file.size > settings.CODE_MAX_BYTES:
            limit = settings.CODE_MAX_BYTES
            message = f"the ZIP is {code_file.size} bytes; at most {limit}"
            raise ValidationError({"model_definition": [message]})
        tenant = submit_tenant(request, user)
        job = job_submit(tenant=tenant, user=user, document=manifest, code=code_file)
        location = API_PREFIX + job.pk
        body = {"model_id": job.pk, "location": location}
        return Response(body, status=http.HTTP_201_CREATED, headers={"Location": location})


class ModelView(FfdlView):
    """`/v1/models/{model_id}`: GET the model and its training status; PATCH `{"status": "halt"}` (or
    `"resume"`, Trainyard's addition) changes the training; DELETE deletes the model."""

    def get(self, request: Request, model_id: str) -> Response:
        job = _ffdl_job(request, model_id)
        return Response(model(job, metrics=job_latest_metrics(job=job)))

    def patch(self, request: Request, model_id: str) -> Response:
        job = _ffdl_job(request, model_id)
        data = request.data
        wanted = data.get("status") if isinstance(data, dict) else None
        if not isinstance(data, dict) or set(data) - {"status"} or wanted not in ("halt", "resume"):
            raise ValidationError({"status": ['send {"status": "halt"} or {"status": "resume"}']})
        change = job_halt if wanted == "halt" else job_resume
        job = change(job=job, user=api_user(request))
        return Response({"model_id": job.pk}, status=http.HTTP_202_ACCEPTED)

    def delete(self, request: Request, model_id: str) -> Response:
        job = _ffdl_job(request, model_id)
        user = api_user(request)
        if job.status in ACTIVE:
            rule = f"model {job.pk} is still {job.status}: halt it first, and delete it once it is halted"
            raise Refused({"": [rule]}, status=409)
        if job.status in WAITING or job.status == JobStatus.HALTED:
            job = job_cancel(job=job, user=user)
        job_delete(job=job, user=user)
        return Response({"model_id": model_id})


class DefinitionView(FfdlView):
    """`/v1/models/{model_id}/definition`: the model-definition ZIP it was submitted with."""

    def get(self, request: Request, model_id: str) -> HttpResponseBase:
        job = _ffdl_job(request, model_id)
        if job.code is None:
            raise Http404(f"model {job.pk} was submitted without a model definition")
        return FileResponse(
            artifact_storage().open(job.code.storage_name, "rb"),
            as_attachment=True,
            filename=f"{job.pk}-definition.zip",
            content_type="application/octet-stream",
        )


class TrainedModelView(FfdlView):
    """`/v1/models/{model_id}/trained_model`: the files the training left in RESULT_DIR, as one ZIP."""

    def get(self, request: Request, model_id: str) -> HttpResponseBase:
        job = _ffdl_job(request, model_id)
        files = list(job_results(job=job))
        if not files:
            raise Http404(f"model {job.pk} has no trained model (no result files)")
        response = StreamingHttpResponse(_zip_stream(files), content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{job.pk}-trainedmodel.zip"'
        return response


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ValidationError({name: ["must be true or false"]})
    return value in ("true", "1")


def _since(request: Request) -> datetime | None:
    """FfDL's `since_time`: empty, milliseconds since the epoch, or an RFC 3339 time."""
    value = request.query_params.get("since_time", "").strip()
    if not value:
        return None
    if value.isdigit():
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        message = "must be an RFC 3339 time or milliseconds since the epoch"
        raise ValidationError({"since_time": [message]}) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class _LogCursor:
    """Reads a job's log forward, learner by learner, from where it last stopped."""

    PAGE = 1000

    def __init__(self, job: Job, since: datetime | None) -> None:
        self.job, self.since = job, since
        self.after = dict.fromkeys(range(job.learners), 0)

    def read(self) -> bytes:
        """The lines not read yet, as text (each line prefixed with its learner when there are several)."""
        out: list[str] = []
        for learner, after in self.after.items():
            while rows := job_log_rows(job=self.job, learner=learner, after=after, limit=self.PAGE):
                after = self.after[learner] = rows[-1][2]
                prefix = f"learner-{learner}: " if len(self.after) > 1 else ""
                out += [prefix + text + "\n" for _, _, _, ts, text in rows if self._shown(ts)]
                if len(rows) < self.PAGE:
                    break
        return "".join(out).encode()

    def _shown(self, ts: datetime | None) -> bool:
        return self.since is None or (ts is not None and ts >= self.since)

    def over(self) -> bool:
        """Whether the job has stopped for good or for now (finished, halted): no line will follow."""
        self.job.refresh_from_db(fields=["status"])
        return self.job.status in TERMINAL or self.job.status == JobStatus.HALTED


def _follow(cursor: _LogCursor) -> Iterator[bytes]:
    deadline = time.monotonic() + FOLLOW_MAX_SECONDS
    while True:
        over = cursor.over() or time.monotonic() > deadline
        if chunk := cursor.read():
            yield chunk
        if over:
            return
        time.sleep(FOLLOW_POLL_SECONDS)


async def _follow_async(cursor: _LogCursor) -> AsyncIterator[bytes]:
    read, over_now = sync_to_async(cursor.read), sync_to_async(cursor.over)
    deadline = time.monotonic() + FOLLOW_MAX_SECONDS
    while True:
        over = await over_now() or time.monotonic() > deadline
        if chunk := await read():
            yield chunk
        if over:
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


class LogsView(FfdlView):
    """`/v1/models/{model_id}/logs`: the training log so far as text; with `follow=true` the response stays
    open and carries new lines until the job finishes or is halted."""

    def get(self, request: Request, model_id: str) -> HttpResponseBase:
        job = _ffdl_job(request, model_id)
        follow, cursor = _flag(request, "follow"), _LogCursor(job, _since(request))
        if not follow:
            content: Any = [cursor.read()]
        elif isinstance(request._request, ASGIRequest):
            content = _follow_async(cursor)
        else:
            content = _follow(cursor)
        return StreamingHttpResponse(content, content_type="application/octet-stream")


class MetricsView(FfdlView):
    """`/v1/models/{model_id}/metrics`: the training's metric points, one FfDL `MetricData` JSON per line."""

    def get(self, request: Request, model_id: str) -> HttpResponseBase:
        job = _ffdl_job(request, model_id)
        lines = [
            json.dumps(
                {
                    "type": "train",
                    "timestamp": millis(s.ts),
                    "iteration": s.step or 0,
                    "Values": {s.name: s.value},
                }
            )
            + "\n"
            for s in job_metric_points(job=job, since=_since(request))
        ]
        return StreamingHttpResponse(["".join(lines).encode()], content_type="application/octet-stream")


def _int(request: Request, name: str, low: int, high: int) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = high + 1
    if not low <= number <= high:
        raise ValidationError({name: [f"must be a whole number from {low} to {high}"]})
    return number


class LoglinesView(FfdlView):
    """`/v1/logs/{model_id}/loglines`: a page of log lines as FfDL's `v1LogLinesList`: `pagesize` lines
    (default 10) from line `pos` (from 1), or the last `-pos` lines when `pos` is negative; `since_time`
    keeps lines from then on (a negative number: the last that many lines)."""

    def get(self, request: Request, model_id: str) -> Response:
        job = _ffdl_job(request, model_id)
        size = _int(request, "pagesize", 1, MAX_LOG_PAGE) or DEFAULT_LOG_PAGE
        pos = _int(request, "pos", -(10**12), 10**12) or 0
        raw_since = request.query_params.get("since_time", "").strip()
        since: datetime | None = None
        if raw_since.startswith("-") and raw_since[1:].isdigit():
            pos = -int(raw_since[1:])
        else:
            since = _since(request)
        tail = -pos if pos < 0 else None
        rows = job_log_slice(job=job, offset=max(pos - 1, 0), limit=size, tail=tail, since=since)
        owner = job.owner.get_username() if job.owner else ""
        lines = [
            {
                "meta": {"training_id": job.pk, "user_id": owner, "time": millis(ts), "rindex": str(index)},
                "line": text,
            }
            for index, (_, _, _, ts, text) in rows
        ]
        return Response({"models": lines})
