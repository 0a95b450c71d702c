"""How large a request body each route takes, checked by the web process before the body is read
(portal.web) and again by the views while they read it.

A code upload (the API's and FfDL's job submission, the portal's submit form) may be CODE_MAX_BYTES plus the
form's other fields (at most DATA_UPLOAD_MAX_MEMORY_SIZE) and its multipart framing; a result file
RESULT_MAX_FILE_BYTES; a TensorBoard piece the largest a tenant's policy may allow; anything else
REQUEST_BODY_MAX_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.urls import Resolver404, resolve

from tenants.policy import MAX_PIECE_BYTES

FRAMING = 64 * 1024  # multipart boundaries and part headers around a form's fields
CODE_ROUTES = {"api-jobs", "job-new", "ffdl-models"}


@dataclass(frozen=True)
class BodyLimit:
    """The most bytes a request body may have, the name of that cap, and the sentence a refusal says."""

    bytes: int
    cap: str
    message: str


def body_limit(method: str, path: str) -> BodyLimit:
    """The limit on the body of a `method` request to `path` (the path alone, without the query)."""
    try:
        name = resolve(path).url_name if method in ("POST", "PUT", "PATCH") else None
    except Resolver404:
        name = None
    if name in CODE_ROUTES:
        code = settings.CODE_MAX_BYTES
        form = code + settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FRAMING
        return BodyLimit(form, "code_bytes", f"a code archive may be at most {code} bytes")
    if name == "pod-result-upload":
        limit = settings.RESULT_MAX_FILE_BYTES
        return BodyLimit(limit, "result_file_bytes", f"a result file may be at most {limit} bytes")
    if name == "pod-event-file-upload":
        return BodyLimit(
            MAX_PIECE_BYTES,
            "tensorboard_piece_bytes",
            f"a TensorBoard piece may be at most {MAX_PIECE_BYTES} bytes",
        )
    limit = settings.REQUEST_BODY_MAX_BYTES
    return BodyLimit(limit, "request_bytes", f"a request body may be at most {limit} bytes")
