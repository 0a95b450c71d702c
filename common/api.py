"""Small helpers shared by the API views."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def api_user(request: Request) -> User:
    """The authenticated user of an API request (every API view requires one)."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise NotAuthenticated()
    return user


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every error in one shape: `{"detail": "...", "errors": {field: [msgs]}}`."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "errors" in data and "detail" in data:
        return response
    if isinstance(data, dict) and set(data) == {"detail"}:
        response.data = {"detail": str(data["detail"]), "errors": {}}
        return response
    errors = _flatten(data)
    detail = "; ".join(f"{field}: {m}" if field else m for field, msgs in errors.items() for m in msgs)
    response.data = {"detail": detail, "errors": errors}
    return response


def _flatten(data: Any, prefix: str = "") -> dict[str, list[str]]:
    if isinstance(data, dict):
        out: dict[str, list[str]] = {}
        for key, value in data.items():
            name = "" if key in ("non_field_errors", "detail") else str(key)
            out.update(_flatten(value, f"{prefix}.{name}".strip(".") if name else prefix))
        return out
    if isinstance(data, list) and all(not isinstance(item, dict | list) for item in data):
        return {prefix: [str(item) for item in data]}
    if isinstance(data, list):
        out = {}
        for index, item in enumerate(data):
            out.update(_flatten(item, f"{prefix}.{index}".strip(".")))
        return out
    return {prefix: [str(data)]}
