"""The API's plumbing, shared by every app's API views: the base view, the error shape and its schema, the
bearer scheme as the schema shows it, the exception handler, the authenticated user, and the shape of an
amount of resources (common.resources.Resources)."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.views.defaults import bad_request
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, AuthenticationFailed, NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from common.errors import Refused

log = logging.getLogger(__name__)


def api_user(request: Request) -> User:
    """The authenticated user of an API request (every API view requires one)."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise NotAuthenticated()
    return user


def body_refusal(exc: Exception) -> tuple[int, str] | None:
    """The status and message for Django's refusal of a request body (too large, too many fields or files),
    or None for any other exception: Django raises these while reading the body, so no parser sees them."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return 413, f"the request body is larger than the {limit}-byte limit"
    if isinstance(exc, TooManyFieldsSent):
        return 400, f"the request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields"
    if isinstance(exc, TooManyFilesSent):
        return 400, f"the request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files"
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every error in one shape: `{"detail": "...", "errors": {field: [msgs]}}`."""
    if isinstance(exc, Refused):
        message = "; ".join(m for msgs in exc.errors.values() for m in msgs)
        return Response(_error(message, exc.errors), status=exc.status)
    if isinstance(exc, DATABASE_OUTAGE):
        body = _database_unavailable(exc, path=context["request"].path)
        return Response(body, status=503, headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})
    refusal = body_refusal(exc)
    if refusal is not None:
        return Response(_error(refusal[1], {"": [refusal[1]]}), status=refusal[0])
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "errors" in data and "detail" in data:
        return response
    if isinstance(data, dict) and set(data) == {"detail"}:
        response.data = _error(str(data["detail"]), {})
        return response
    errors = _flatten(data)
    detail = "; ".join(f"{field}: {m}" if field else m for field, msgs in errors.items() for m in msgs)
    response.data = _error(detail, errors)
    return response


# What the database driver raises when PostgreSQL is down, restarting, or dropped the connection (Django's
# wrappers; a deadlock or a statement timeout is an OperationalError too, and worth a retry as well).
DATABASE_OUTAGE = (OperationalError, InterfaceError)
DATABASE_RETRY_AFTER_SECONDS = 5
DATABASE_UNAVAILABLE = "the database cannot answer this request now; try again shortly"


def database_unavailable(exc: Exception, *, path: str) -> JsonResponse:
    """The API's answer while PostgreSQL cannot be reached: 503 in the one error shape with Retry-After,
    instead of Django's HTML 500 page (and the exception logged, without its traceback)."""
    response = JsonResponse(_database_unavailable(exc, path=path), status=503)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def _database_unavailable(exc: Exception, *, path: str) -> dict[str, Any]:
    log.warning("database unavailable for %s: %s: %s", path, type(exc).__name__, str(exc).strip())
    return _error(DATABASE_UNAVAILABLE, {"": [DATABASE_UNAVAILABLE]})


def database_outage(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: every operation documents the 503 it answers while the database
    cannot be reached (`database_unavailable`)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault(
                    "503",
                    {"description": "A service this request needs cannot be reached.", "content": error},
                )
    return result


def _error(detail: str, errors: dict[str, list[str]]) -> dict[str, Any]:
    return dict(ErrorSerializer({"detail": detail, "errors": errors}).data)


def api_bad_request(request: HttpRequest, exception: Exception) -> Any:
    """Django's handler400: under /api/ an error in the API's shape (413 for a body over the size limit), so
    plain Django views there (the ones learner pods call) answer like the rest of the API; pages keep
    Django's HTML page."""
    if not request.path.startswith("/api/"):
        return bad_request(request, exception)
    code, message = body_refusal(exception) or (400, "bad request")
    return JsonResponse(_error(message, {"": [message]}), status=code)


class ServiceUnavailable(APIException):
    """A service the request needs (the cluster) cannot be reached: a 503 in the one error shape."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "a service this request needs cannot be reached"
    default_code = "service_unavailable"


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


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Documents `tenants.tokens.BearerTokenAuthentication` as an HTTP bearer scheme in the schema."""

    target_class = "tenants.tokens.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "ty_...",
            "description": "A personal API token (`manage.py token create`, or POST /api/v1/tokens/).",
        }


class ApiView(APIView):
    """The base of every API view: DRF's APIView, with requests that fail authentication throttled too.

    DRF checks throttles only after authentication and permissions pass, so an anonymous client or one
    guessing tokens would get 401s forever and never a 429; here the throttles (anonymous rate by client
    address) run before those 401s as well.
    """

    def perform_authentication(self, request: Request) -> None:
        try:
            super().perform_authentication(request)
        except AuthenticationFailed:
            self.check_throttles(request)  # the request is anonymous now
            raise

    def permission_denied(
        self, request: Request, message: str | None = None, code: str | None = None
    ) -> NoReturn:
        if request.authenticators and not request.successful_authenticator:
            self.check_throttles(request)
        super().permission_denied(request, message, code)


class ErrorSerializer(serializers.Serializer):
    """Every API error (common.api.exception_handler renders each with this serializer)."""

    def get_fields(self) -> dict[str, serializers.Field]:
        # Declared here, not as class attributes: a field named `errors` would hide Serializer.errors.
        return {
            "detail": serializers.CharField(help_text="The whole error in one sentence."),
            "errors": serializers.DictField(
                child=serializers.ListField(child=serializers.CharField()),
                help_text='Messages per field ("" for the request as a whole); may be empty.',
            ),
        }


def nullable_objects(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: every nullable nested object says plainly that it may be null.

    drf-spectacular writes a nullable nested serializer as `{"allOf": [{"$ref": ...}], "nullable": true}`;
    OpenAPI 3.0.3 gives `nullable` meaning only beside a `type`, so to a strict validator (and to client
    generators that follow it) that schema refuses null. This rewrites it the way drf-spectacular already
    writes a nullable choice: one of the object or null.
    """

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("nullable") is True and "type" not in node and len(node.get("allOf", ())) == 1:
                node["oneOf"] = [node.pop("allOf")[0], {"enum": [None]}]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(result)
    return result


def body_too_large(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: every operation that takes a body documents the 413 it answers
    when the body is over DATA_UPLOAD_MAX_MEMORY_SIZE (common.api.body_refusal)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation["responses"].setdefault(
                    "413", {"description": "The request body is too large.", "content": error}
                )
    return result


def scope_refusals(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: every write documents the 403 an API token too narrow for it
    gets (tenants.tokens.TokenScopePermission), whether or not its role checks answer 403 too."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method in ("post", "put", "patch", "delete") and isinstance(operation, dict):
                operation["responses"].setdefault(
                    "403", {"description": "Not allowed: your role, or your token's scope.", "content": error}
                )
    return result


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Schema responses in the error shape for these status codes."""
    described = {
        400: "Invalid request: field errors.",
        401: "Not authenticated, or the bearer token is invalid, expired or revoked.",
        403: "Not allowed (role, or the API token's scope), or a session request without its CSRF token.",
        404: "Not found, or not visible to you (another tenant's).",
        409: "The object's state does not allow this.",
        429: "Too many requests, or the tenant's queue is full.",
        503: "A service this request needs (the cluster, the database) cannot be reached.",
    }
    return {code: OpenApiResponse(ErrorSerializer, description=described[code]) for code in codes}


class ResourcesSerializer(serializers.Serializer):
    """An amount of GPUs, CPU and memory (a `Resources`); quotas, usage and job demands extend it."""

    gpus = serializers.IntegerField(help_text="Whole GPUs.")
    cpu_millis = serializers.IntegerField(help_text="CPU in millicores (1000 = one core).")
    memory_mib = serializers.IntegerField(help_text="Memory in MiB.")
