"""`/jobs/<id>/tensorboard/...`: the job's TensorBoard, proxied. Login required; the job comes through the
scoping helper (another tenant's job is a 404 like a missing one); a job that sent no event files is a 404.

TensorBoard is read-only, and its page POSTs its data queries without Django's CSRF token, so the view is
CSRF-exempt; the session cookie is SameSite=Lax, so another site cannot make a logged-in browser POST here.
The portal's cookies and Authorization header are never passed on to TensorBoard.
"""

from __future__ import annotations

import httpx
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from jobs.models import Job
from jobs.selectors import job_get
from jobs.tensorboard.manager import TensorBoardBusy, TensorBoardFailed, boards
from jobs.tensorboard.sync import event_files_sync

FORWARDED_REQUEST_HEADERS = ("accept", "accept-language", "content-type", "x-xsrf-protected", "if-none-match")
DROPPED_RESPONSE_HEADERS = {
    "connection", "content-encoding", "content-length", "keep-alive", "set-cookie", "transfer-encoding",
    "date", "server",
}  # fmt: skip
TIMEOUT = 60.0


def _unavailable(message: str) -> HttpResponse:
    response = HttpResponse(
        f"TensorBoard is not available: {message}\n", status=503, content_type="text/plain"
    )
    response["Retry-After"] = "60"
    return response


@csrf_exempt
@login_required
def job_tensorboard(request: HttpRequest, job_id: str, path: str = "") -> HttpResponse:
    """Forward one request to the job's TensorBoard, starting it (or reusing it) first."""
    try:
        job = job_get(user=request.user, job_id=job_id)
    except Job.DoesNotExist:
        raise Http404("no such job") from None
    if not job.event_files.exists():
        raise Http404("this job has sent no TensorBoard event files")
    try:
        board = boards().acquire(job.pk, lambda logdir: event_files_sync(job=job, logdir=logdir))
    except (TensorBoardBusy, TensorBoardFailed) as exc:
        return _unavailable(str(exc))
    headers = {
        name: value for name, value in request.headers.items() if name.lower() in FORWARDED_REQUEST_HEADERS
    }
    url = f"{board.url}{request.get_full_path()}"
    try:
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
            answer = client.request(
                request.method or "GET",
                url,
                headers=headers,
                content=request.body if request.method not in ("GET", "HEAD") else None,
            )
    except httpx.HTTPError as exc:
        return _unavailable(f"its process did not answer ({exc})")
    finally:
        boards().touch(job.pk)
    response = HttpResponse(answer.content, status=answer.status_code)
    for name, value in answer.headers.items():
        if name.lower() not in DROPPED_RESPONSE_HEADERS:
            response[name] = value
    return response
