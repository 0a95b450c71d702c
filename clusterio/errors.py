"""Typed errors of the Kubernetes I/O layer, so callers never handle `ApiException` or urllib3 errors.

Callers decide by type: `NotFound` and `Conflict` drive idempotent create/delete, `QuotaExceeded` (a
`Forbidden`) is a quota refusal ("exceeded quota") that may pass, other `Forbidden`s are RBAC refusals that
will not, `Invalid` a rejected object, and `Unavailable` means the API could
not be reached even after the client's retries, so the caller may try again later.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MISSING_CLASS = re.compile(r"no PriorityClass with name (\S+) was found")


class ClusterError(Exception):
    """An API call failed; `status` is the HTTP status (None without a response), `reason` the API's."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        prefix = f"{self.status} {self.reason}".strip() if self.status is not None else self.reason
        return f"{prefix}: {self.message}" if prefix else self.message


class BadRequest(ClusterError):
    """400: a malformed request, or a pod log asked for before its container started."""


class Forbidden(ClusterError):
    """403 (or 401): refused, e.g. by a ResourceQuota ("exceeded quota") or missing RBAC."""


class QuotaExceeded(Forbidden):
    """403 from a ResourceQuota ("exceeded quota"): transient, since the quota frees up as pods end (also
    the previous attempt's, which count until they are gone)."""


class PriorityClassMissing(Forbidden):
    """403 from the Priority admission plugin: the pod names a PriorityClass the cluster does not have (an
    operator's override naming one not created yet, or deleted since). It passes once the class exists."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message, status=status, reason=reason)
        found = _MISSING_CLASS.search(message)
        self.name = found.group(1) if found else ""


class NamespaceNotOwned(ClusterError):
    """The tenant's namespace exists without this installation's labels (another team's, another
    installation's): the platform neither adopts nor changes it. `labels` are the ones that would make it
    this installation's, for an operator who means to hand it over."""

    def __init__(self, namespace: str, labels: dict[str, str]) -> None:
        super().__init__(f"namespace {namespace} exists and is not managed by this installation")
        self.namespace = namespace
        self.labels = labels


class NotFound(ClusterError):
    """404: the object (or the namespace, or the API group) does not exist."""


class Conflict(ClusterError):
    """409: the name is taken (by an object that is not ours) or the resourceVersion is stale."""


class Gone(ClusterError):
    """410: a resourceVersion or continue token is too old; the caller must list again."""


class Invalid(ClusterError):
    """422: the server rejected the object as invalid."""


class Unavailable(ClusterError):
    """5xx, 429, timeouts or connection errors that persisted after every retry."""


_BY_STATUS: dict[int, type[ClusterError]] = {
    400: BadRequest,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
}


def is_retriable_status(status: int | None) -> bool:
    """Tell whether a response status is worth retrying: 429, any 5xx, or no response at all."""
    return status is None or status == 429 or status >= 500


def error_for_status(status: int | None, reason: str, message: str) -> ClusterError:
    """Build the typed error for an HTTP status (or a Status object's `code`)."""
    if status is not None and is_retriable_status(status):
        return Unavailable(message, status=status, reason=reason)
    cls = _BY_STATUS.get(status or 0, ClusterError)
    if cls is Forbidden and "exceeded quota" in message:
        cls = QuotaExceeded
    elif cls is Forbidden and _MISSING_CLASS.search(message):
        cls = PriorityClassMissing
    return cls(message, status=status, reason=reason)


def error_from_status_object(status_obj: dict[str, Any]) -> ClusterError:
    """Build the typed error for a `Status` object, as found in a watch ERROR event."""
    code = status_obj.get("code")
    return error_for_status(
        int(code) if isinstance(code, int) else None,
        str(status_obj.get("reason") or ""),
        str(status_obj.get("message") or "error event"),
    )


def error_from_api_exception(exc: Any) -> ClusterError:
    """Convert a `kubernetes.client.ApiException`, reading reason and message from its Status body."""
    status = getattr(exc, "status", None) or None
    reason = str(getattr(exc, "reason", "") or "")
    message = reason or "API error"
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            message = str(body)[:500]
        else:
            if isinstance(parsed, dict):
                reason = str(parsed.get("reason") or reason)
                message = str(parsed.get("message") or message)
    return error_for_status(status, reason, message)
