"""The endpoints learner pods call (docs/artifacts.md): fetch the attempt's code, upload result files,
report the attempt's end. No session, no API token: only the attempt's artifact token, in its header.
Answers are short JSON bodies `{"detail": ...}` a program can print."""

from __future__ import annotations

import hashlib
import json
import posixpath
import tempfile
from typing import Any

from django.conf import settings
from django.core.files import File
from django.http import FileResponse, HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from jobs.artifacts.storage import artifact_storage, result_name
from jobs.artifacts.tokens import CODE_READ, HEADER, RESULTS_WRITE, Grant, TokenRefused, check_token
from jobs.models import ResultFile
from jobs.services.caps import CapHit, result_release, result_reserve, result_room
from jobs.services.results import results_reported
from tenants.policy import write_caps

_CHUNK = 1 << 20


def _refused(message: str, status: int = 403) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def _grant(request: HttpRequest, job_id: str, attempt: int, scope: str) -> Grant:
    return check_token(request.headers.get(HEADER), job_id=job_id, attempt=attempt, scope=scope)


@require_http_methods(["GET"])
def code_download(request: HttpRequest, job_id: str, attempt: int) -> HttpResponseBase:
    """The attempt's code ZIP, for the fetch init container."""
    try:
        grant = _grant(request, job_id, attempt, CODE_READ)
    except TokenRefused as exc:
        return _refused(str(exc))
    archive = grant.job.code
    if archive is None:
        return _refused(f"job {job_id} has no code", status=404)
    response = FileResponse(
        artifact_storage().open(archive.storage_name, "rb"), content_type="application/zip"
    )
    response["X-Trainyard-Sha256"] = archive.sha256
    return response


def clean_result_path(path: str) -> str | None:
    """The normalized relative path of a result file, or None when it is not one we store."""
    if not path or len(path) > 512 or path.startswith("/") or "\\" in path:
        return None
    if any(ord(c) < 32 for c in path) or ".." in path.split("/"):
        return None
    normal = posixpath.normpath(path)
    return None if normal in (".", "") or normal.startswith("../") else normal


@csrf_exempt
@require_http_methods(["PUT"])
def result_upload(
    request: HttpRequest, job_id: str, attempt: int, learner: int, path: str
) -> HttpResponseBase:
    """Store one result file (the request body), checked against its `X-Trainyard-Sha256` header."""
    try:
        grant = _grant(request, job_id, attempt, RESULTS_WRITE)
    except TokenRefused as exc:
        return _refused(str(exc))
    relative = clean_result_path(path)
    if relative is None:
        return _refused(f"{path!r} is not a relative path inside RESULT_DIR", status=400)
    if learner >= grant.job.learners:
        return _refused(f"job {job_id} has no learner {learner}", status=400)
    caps = write_caps(grant.job.tenant)
    room = result_room(job=grant.job, attempt=attempt, learner=learner, path=relative, caps=caps)
    if isinstance(room, CapHit):
        return JsonResponse(room.body(), status=room.status)
    expected = (request.headers.get("X-Trainyard-Sha256") or "").lower()
    with tempfile.TemporaryFile() as spool:
        digest, size = hashlib.sha256(), 0
        while chunk := request.read(_CHUNK):
            size += len(chunk)
            if size > settings.RESULT_MAX_FILE_BYTES:
                return _refused(f"a result file may be at most {settings.RESULT_MAX_FILE_BYTES} bytes", 413)
            if size > room:
                break  # past the attempt's byte cap: result_reserve refuses it below, nothing is stored
            digest.update(chunk)
            spool.write(chunk)
        sha = digest.hexdigest()
        if size <= room and expected and expected != sha:
            return _refused(f"the body's sha256 is {sha}, not {expected}: the upload was damaged", 400)
        reserved = result_reserve(
            job=grant.job, attempt=attempt, learner=learner, path=relative, size=size, caps=caps
        )
        if isinstance(reserved, CapHit):
            return JsonResponse(reserved.body(), status=reserved.status)
        try:
            spool.seek(0)
            _store_result(grant, attempt, learner, relative, spool, size, sha)
        except BaseException:
            result_release(reservation=reserved)
            raise
    return JsonResponse({"path": relative, "size": size, "sha256": sha}, status=201)


def _store_result(
    grant: Grant, attempt: int, learner: int, path: str, spool: Any, size: int, sha: str
) -> None:
    """Put the spooled file in artifact storage, then its row in the database."""
    name = result_name(grant.job.tenant.slug, grant.job.pk, attempt, learner, path)
    storage = artifact_storage()
    if storage.exists(name):
        storage.delete(name)
    stored = storage.save(name, File(spool))
    ResultFile.objects.update_or_create(
        job=grant.job,
        attempt=attempt,
        learner=learner,
        path=path,
        defaults={"size": size, "sha256": sha, "storage_name": stored},
    )


# What the completion report may say: an exit code (negative: killed by a signal) and counts that fit the
# database's bigint.
REPORT_RANGES = {
    "exit_code": (-(2**31), 2**31 - 1),
    "files": (0, 2**63 - 1),
    "bytes": (0, 2**63 - 1),
    "checkpoint_bytes": (0, 2**63 - 1),
}


@csrf_exempt
@require_http_methods(["POST"])
def results_complete(request: HttpRequest, job_id: str, attempt: int, learner: int) -> HttpResponseBase:
    """The launcher's report once its command exited: exit code, files uploaded, checkpoint size."""
    try:
        grant = _grant(request, job_id, attempt, RESULTS_WRITE)
    except TokenRefused as exc:
        return _refused(str(exc))
    try:
        report: Any = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        return _refused("the body must be a JSON object", status=400)
    if not isinstance(report, dict):
        return _refused("the body must be a JSON object", status=400)
    numbers = {k: report.get(k) for k in REPORT_RANGES}
    for key, value in numbers.items():
        low, high = REPORT_RANGES[key]
        if value is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        ):
            return _refused(f"{key} must be a whole number from {low} to {high}", status=400)
    capped = results_reported(
        job=grant.job, attempt=attempt, learner=learner, report=numbers, caps=write_caps(grant.job.tenant)
    )
    if isinstance(capped, CapHit):
        return JsonResponse(capped.body(), status=capped.status)
    return JsonResponse({"detail": "recorded"})
