"""The endpoint learner launchers send TensorBoard event files to, piece by piece (docs/artifacts.md):
`PUT <platform>/api/v1/artifacts/<job>/<attempt>/<learner>/tensorboard/files/<path>` with the attempt's
artifact token, `X-Trainyard-Offset` (where the body starts in the file) and `X-Trainyard-Sha256`.

Answers: 201 stored (with the size now held; its scalars are read by a worker, jobs/tensorboard/tasks.py),
400 for a bad path, offset, learner or checksum, 403 for the token, 409 `{"size": N}` when the offset is not
where the stored file ends (nor 0, which starts the file again), 413 for a piece or a file too large, or
`{"cap": ..., "limit": N}` for a piece past the attempt's TensorBoard byte cap (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import posixpath
import uuid

from django.conf import settings
from django.core.files.base import ContentFile
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from jobs.artifacts.pod_views import _grant, _refused, clean_result_path
from jobs.artifacts.storage import artifact_storage, artifacts_delete
from jobs.artifacts.tokens import RESULTS_WRITE, TokenRefused
from jobs.models import EventFile
from jobs.services.caps import CapHit
from jobs.services.tensorboard import OffsetConflict, TooManyFiles, event_file_append
from tenants.policy import write_caps

OFFSET_HEADER = "X-Trainyard-Offset"


def event_piece_name(
    tenant_slug: str, job_id: str, attempt: int, learner: int, path: str, offset: int
) -> str:
    """Where one piece of an event file lives in artifact storage: one folder per file (its path hashed), and
    a name of its own per upload, so a refused upload never touches a stored piece."""
    digest = hashlib.sha256(path.encode("utf-8")).hexdigest()[:24]
    return f"tensorboard/{tenant_slug}/{job_id}/{attempt}/{learner}/{digest}/{offset:015d}-{uuid.uuid4().hex}"


def _offset(raw: str | None) -> int | None:
    if raw is None or not raw.isdigit() or len(raw) > 15:
        return None
    return int(raw)


@csrf_exempt
@require_http_methods(["PUT"])
def event_file_upload(
    request: HttpRequest, job_id: str, attempt: int, learner: int, path: str
) -> HttpResponseBase:
    """Store one piece of an event file and queue the reading of its scalars on a worker."""
    try:
        grant = _grant(request, job_id, attempt, RESULTS_WRITE)
    except TokenRefused as exc:
        return _refused(str(exc))
    relative = clean_result_path(path)
    if relative is None:
        return _refused(f"{path!r} is not a relative path inside the event folder", status=400)
    if "tfevents" not in posixpath.basename(relative):
        return _refused(f"{relative!r} is not a TensorBoard event file (its name has no 'tfevents')", 400)
    if learner >= grant.job.learners:
        return _refused(f"job {job_id} has no learner {learner}", status=400)
    offset = _offset(request.headers.get(OFFSET_HEADER))
    if offset is None:
        return _refused(f"send the piece's start in the file as a whole number in {OFFSET_HEADER}", 400)
    caps = write_caps(grant.job.tenant)
    limit = caps.tensorboard_piece_max_bytes
    data = request.read(limit + 1)
    if len(data) > limit:
        return _refused(f"a piece may be at most {limit} bytes; send the file in smaller pieces", 413)
    expected = (request.headers.get("X-Trainyard-Sha256") or "").lower()
    sha = hashlib.sha256(data).hexdigest()
    if expected and expected != sha:
        return _refused(f"the body's sha256 is {sha}, not {expected}: the upload was damaged", 400)
    held = (
        EventFile.objects.filter(job=grant.job, attempt=attempt, learner=learner, path=relative)
        .values_list("size", flat=True)
        .first()
    ) or 0
    if offset not in (held, 0):
        return JsonResponse({"detail": str(OffsetConflict(held)), "size": held}, status=409)
    if offset + len(data) > settings.TENSORBOARD_FILE_MAX_BYTES:
        return _refused(f"an event file may be at most {settings.TENSORBOARD_FILE_MAX_BYTES} bytes", 413)
    if not data:
        return JsonResponse({"path": relative, "size": held, "queued": False}, status=201)
    name = event_piece_name(grant.job.tenant.slug, job_id, attempt, learner, relative, offset)
    stored = artifact_storage().save(name, ContentFile(data))
    try:
        appended = event_file_append(
            job=grant.job,
            attempt=attempt,
            learner=learner,
            path=relative,
            offset=offset,
            size=len(data),
            stored_name=stored,
            max_files=settings.TENSORBOARD_MAX_FILES,
            caps=caps,
        )
    except OffsetConflict as exc:
        artifacts_delete([stored])
        return JsonResponse({"detail": str(exc), "size": exc.size}, status=409)
    except TooManyFiles as exc:
        artifacts_delete([stored])
        return _refused(str(exc), status=400)
    except BaseException:
        artifacts_delete([stored])
        raise
    if isinstance(appended, CapHit):
        artifacts_delete([stored])
        return JsonResponse(appended.body(), status=appended.status)
    return JsonResponse({"path": relative, "size": appended.size, "queued": True}, status=201)
