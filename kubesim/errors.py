"""API errors rendered as ``Status`` objects with the apiserver's codes and reasons."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API answers with a ``Status`` body (``code``, ``reason``, ``message``)."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """Return the ``Status`` object for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404 for a missing object, worded as ``pods "x" not found``."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404, "NotFound", f'{qualified} "{name}" not found', {"name": name, "group": group, "kind": resource}
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """409 for a create whose name is taken."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified} "{name}" already exists',
        {"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    """409 for a write based on a stale resourceVersion."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": resource},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """422 with field causes given as ``(field, reason, message)`` triples."""
    text = "; ".join(f"{field}: {message}" for field, _, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
        },
    )


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def forbidden(resource: str, name: str, message: str, group: str = "") -> ApiError:
    """403 Forbidden (admission refusals such as quota)."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        403,
        "Forbidden",
        f'{qualified} "{name}" is forbidden: {message}',
        {"name": name, "group": group, "kind": resource},
    )


def gone(message: str) -> ApiError:
    """410 Gone for a watch or continue token older than the kept history."""
    return ApiError(410, "Expired", message)


def too_large_resource_version(wanted: int, current: int, retry_seconds: int) -> ApiError:
    """504 for a read at a resourceVersion the store has not reached, worded as the apiserver's storage
    layer words it (``storage.NewTooLargeResourceVersionError``); a client relists or retries later."""
    details: dict[str, Any] = {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    }
    if retry_seconds:
        details["retryAfterSeconds"] = retry_seconds
    return ApiError(
        504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {current}", details
    )
