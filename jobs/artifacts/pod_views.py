"""The endpoints learner pods call (docs/artifacts.md): fetch the attempt's code, upload result files,
report the attempt's end. No session, no API token: only the attempt's artifact token, in its header.
Answers are short JSON bodies `{"detail": ...}` a program can print."""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import secrets
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
from tenants.policy import WriteCaps, write_caps

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


class _TooLarge(Exception):
    """The body passed a limit while it was being stored."""


class _BodyReader:
    """The request body as a read-only, unseekable file for a storage backend: hashed and counted as it is
    read, and cut with _TooLarge the moment it passes `limit` (a body without a Content-Length, too)."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        self._request = request
        self._limit = limit
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (fewer only at the end: S3's managed upload takes a short read for the end of
        the file), `_CHUNK` when no size is given."""
        wanted = _CHUNK if size is None or size < 0 else size
        pieces: list[bytes] = []
        got = 0
        while got < wanted:
            piece = self._request.read(min(wanted - got, _CHUNK))
            if not piece:
                break
            self.size += len(piece)
            if self.size > self._limit:
                raise _TooLarge()
            self.digest.update(piece)
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

    def seekable(self) -> bool:
        return False

    closed = False

    def close(self) -> None:
        return None

    def chunks(self, chunk_size: int | None = None) -> Any:
        while piece := self.read(chunk_size or _CHUNK):
            yield piece


def _declared_length(request: HttpRequest) -> int | None:
    """The body's Content-Length, or None when it has none (chunked) or a malformed one."""
    raw = request.META.get("CONTENT_LENGTH") or ""
    return int(raw) if raw.isdigit() else None


def _too_large(limit: int) -> JsonResponse:
    message = f"a result file may be at most {limit} bytes"
    return JsonResponse(
        {"detail": message, "errors": {"": [message]}, "cap": "result_file_bytes", "limit": limit}, status=413
    )


@csrf_exempt
@require_http_methods(["PUT"])
def result_upload(
    request: HttpRequest, job_id: str, attempt: int, learner: int, path: str
) -> HttpResponseBase:
    """Store one result file (the request body), checked against its `X-Trainyard-Sha256` header.

    The body goes straight into artifact storage a piece at a time (never whole in memory, nor spooled here
    first) under a name of its own; only once it is complete, its checksum matches and the attempt's caps
    take it does its row point at it (the file it replaces is deleted then). A Content-Length over
    RESULT_MAX_FILE_BYTES or over the attempt's room is refused before one byte is read; a body that passes
    either while it is read is cut there, and what was stored of it deleted.
    """
    try:
        grant = _grant(request, job_id, attempt, RESULTS_WRITE)
    except TokenRefused as exc:
        return _refused(str(exc))
    relative = clean_result_path(path)
    if relative is None:
        return _refused(f"{path!r} is not a relative path inside RESULT_DIR", status=400)
    if learner >= grant.job.learners:
        return _refused(f"job {job_id} has no learner {learner}", status=400)
    limit = settings.RESULT_MAX_FILE_BYTES
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        return _too_large(limit)
    caps = write_caps(grant.job.tenant)
    room = result_room(job=grant.job, attempt=attempt, learner=learner, path=relative, caps=caps)
    if isinstance(room, CapHit):
        return JsonResponse(room.body(), status=room.status)
    if declared is not None and declared > room:
        return _cap_refusal(grant, attempt, learner, relative, declared, caps)
    expected = (request.headers.get("X-Trainyard-Sha256") or "").lower()
    storage = artifact_storage()
    name = result_name(grant.job.tenant.slug, grant.job.pk, attempt, learner, relative)
    if storage.exists(name):  # an earlier upload of this path: keep it until this one is complete
        name = f"{name}~{secrets.token_hex(4)}"
    body = _BodyReader(request, min(limit, room))
    try:
        stored = storage.save(name, File(body, name=name))  # type: ignore[arg-type]
    except _TooLarge:
        _discard(storage, name)
        if body.size > limit:
            return _too_large(limit)
        return _cap_refusal(grant, attempt, learner, relative, body.size, caps)
    except BaseException:
        _discard(storage, name)
        raise
    sha, size = body.digest.hexdigest(), body.size
    if expected and expected != sha:
        _discard(storage, stored)
        return _refused(f"the body's sha256 is {sha}, not {expected}: the upload was damaged", 400)
    reserved = result_reserve(
        job=grant.job, attempt=attempt, learner=learner, path=relative, size=size, caps=caps
    )
    if isinstance(reserved, CapHit):
        _discard(storage, stored)
        return JsonResponse(reserved.body(), status=reserved.status)
    try:
        replaced = _record_result(grant, attempt, learner, relative, stored, size, sha)
    except BaseException:
        result_release(reservation=reserved)
        _discard(storage, stored)
        raise
    if replaced and replaced != stored:
        _discard(storage, replaced)
    return JsonResponse({"path": relative, "size": size, "sha256": sha}, status=201)


def _cap_refusal(
    grant: Grant, attempt: int, learner: int, path: str, size: int, caps: WriteCaps
) -> JsonResponse:
    """The attempt's byte cap refusing a file of `size` bytes (recorded once as a `caps` event)."""
    hit = result_reserve(job=grant.job, attempt=attempt, learner=learner, path=path, size=size, caps=caps)
    if isinstance(hit, CapHit):
        return JsonResponse(hit.body(), status=hit.status)
    result_release(reservation=hit)  # room was freed meanwhile: still, this body was not stored
    return _refused("the attempt's room for results changed during the upload; send the file again", 409)


def _discard(storage: Any, name: str) -> None:
    with contextlib.suppress(Exception):
        storage.delete(name)


def _record_result(
    grant: Grant, attempt: int, learner: int, path: str, stored: str, size: int, sha: str
) -> str:
    """Point the file's row at what was stored; the storage name it pointed at before ('' if none)."""
    previous = (
        ResultFile.objects.filter(job=grant.job, attempt=attempt, learner=learner, path=path)
        .values_list("storage_name", flat=True)
        .first()
    )
    ResultFile.objects.update_or_create(
        job=grant.job,
        attempt=attempt,
        learner=learner,
        path=path,
        defaults={"size": size, "sha256": sha, "storage_name": stored},
    )
    return previous or ""


# What the completion report may say: an exit code (negative: killed by a signal) and counts that fit the
# database's bigint.
REPORT_RANGES = {
    "exit_code": (-(2**31), 2**31 - 1),
    "files": (0, 2**63 - 1),
    "bytes": (0, 2**63 - 1),
    "checkpoint_bytes": (0, 2**63 - 1),
}


REFUSED_MAX = 50  # refused files one report may name (the launcher names at most as many)
REFUSED_SHAPE = "refused must be a list of at most 50 {path, size, status, detail} objects"


def _refused_files(value: Any) -> list[dict[str, Any]] | str:
    """The report's `refused` list, checked (each path at most 512 characters, detail 300); the message
    for a 400 when it is not one."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > REFUSED_MAX:
        return REFUSED_SHAPE
    checked = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"path", "size", "status", "detail"}:
            return REFUSED_SHAPE
        path, size, status, detail = (item.get(k) for k in ("path", "size", "status", "detail"))
        numbers_ok = all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63 for n in (size, status)
        )
        if not isinstance(path, str) or not isinstance(detail, str | None):
            return REFUSED_SHAPE
        if not numbers_ok or not 0 < len(path) <= 512 or any(ord(c) < 32 for c in path):
            return REFUSED_SHAPE
        checked.append({"path": path, "size": size, "status": status, "detail": (detail or "")[:300]})
    return checked


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
    refused = _refused_files(report.get("refused"))
    if isinstance(refused, str):
        return _refused(refused, status=400)
    capped = results_reported(
        job=grant.job,
        attempt=attempt,
        learner=learner,
        report=numbers,
        caps=write_caps(grant.job.tenant),
        refused=refused,
    )
    if isinstance(capped, CapHit):
        return JsonResponse(capped.body(), status=capped.status)
    return JsonResponse({"detail": "recorded"})
