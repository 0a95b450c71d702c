"""Middleware of the platform's own: a request id on every request and log line, the CSP header, and the
API's 503 while the database is down.

Both work in sync and async stacks (daphne serves Django in async mode), so neither costs a thread hop.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

from common.api import DATABASE_OUTAGE, database_unavailable
from portal.logging import job_id_var, request_id_var

REQUEST_ID_HEADER = "X-Request-ID"
# ingress-nginx sends its own request id (32 hex digits) as X-Request-ID; anything odd is replaced.
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,128}$")

GetResponse = Callable[[HttpRequest], Any]


class _Hybrid:
    """A middleware that is sync or async as the stack around it is."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        self.before(request)
        try:
            response = self.get_response(request)
        finally:
            self.after_all(request)
        return self.after(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        self.before(request)
        try:
            response = await self.get_response(request)
        finally:
            self.after_all(request)
        return self.after(request, response)

    def before(self, request: HttpRequest) -> None:
        """Called before the view."""

    def after_all(self, request: HttpRequest) -> None:
        """Called after the view, also when it raised."""

    def after(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        """Called with the response."""
        return response


def request_id_of(request: HttpRequest) -> str:
    """The id of this request: the proxy's X-Request-ID when it looks like one, else a new one."""
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    return incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex


class RequestIdMiddleware(_Hybrid):
    """Gives each request an id (`request.request_id`, the `X-Request-ID` response header) and puts it, and
    the job id of `/jobs/<job_id>/...` routes, into every log record made while it is handled."""

    def before(self, request: HttpRequest) -> None:
        request_id = request_id_of(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        request._log_tokens = (request_id_var.set(request_id), job_id_var.set(None))  # type: ignore[attr-defined]

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: Sequence[Any],
        view_kwargs: Mapping[str, Any],
    ) -> None:
        job_id = view_kwargs.get("job_id")
        if isinstance(job_id, str):
            job_id_var.set(job_id)

    def after_all(self, request: HttpRequest) -> None:
        request_token, job_token = request._log_tokens  # type: ignore[attr-defined]
        job_id_var.reset(job_token)
        request_id_var.reset(request_token)

    def after(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        return response


def csp_header(policy: Mapping[str, Sequence[str] | str | bool]) -> str:
    """`{"default-src": ["'self'"], "upgrade-insecure-requests": True}` → `default-src 'self'; upgrade-...`
    (the shape of Django 6's SECURE_CSP, so moving to its built-in middleware is a settings-free swap)."""
    parts = []
    for directive, value in policy.items():
        if value is True:
            parts.append(directive)
        elif value:
            sources = [value] if isinstance(value, str) else list(value)
            parts.append(" ".join([directive, *sources]))
    return "; ".join(parts)


class ContentSecurityPolicyMiddleware(_Hybrid):
    """Sends `Content-Security-Policy` from settings.SECURE_CSP (nothing when it is empty); a response that
    set its own keeps it. SECURE_CSP_PATH_OVERRIDES maps a path prefix to directives that replace the base
    ones there (Swagger UI's page has an inline script). Django 5.2 has no CSP support of its own and
    django-csp is not a requirement."""

    def __init__(self, get_response: GetResponse) -> None:
        super().__init__(get_response)
        policy: Mapping[str, Any] = getattr(settings, "SECURE_CSP", {}) or {}
        overrides: Mapping[str, Mapping[str, Any]] = getattr(settings, "SECURE_CSP_PATH_OVERRIDES", {}) or {}
        self.header = csp_header(policy)
        self.by_prefix = [
            (prefix, csp_header({**policy, **override}))
            for prefix, override in sorted(overrides.items(), key=lambda item: -len(item[0]))
        ]

    def after(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if "Content-Security-Policy" in response:
            return response
        header = next((h for prefix, h in self.by_prefix if request.path.startswith(prefix)), self.header)
        if header:
            response["Content-Security-Policy"] = header
        return response


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: the socket's, or with TRUSTED_PROXY_COUNT proxies in front the address that
    many hops from the right of X-Forwarded-For (what the outermost trusted proxy saw; anything to its
    left the client could have written)."""
    proxies = settings.TRUSTED_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies > 0 and forwarded:
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    return request.META.get("REMOTE_ADDR")


class DatabaseOutageMiddleware(MiddlewareMixin):
    """Under /api/, a view that raised because PostgreSQL cannot be reached answers 503 in the API's error
    shape (common.api.database_unavailable), not Django's HTML 500 page. DRF views get the same answer from
    the API's exception handler; this covers the plain Django views under /api/ (the ones learner pods
    call). Pages keep Django's handling."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if request.path.startswith("/api/") and isinstance(exception, DATABASE_OUTAGE):
            return database_unavailable(exception, path=request.path)
        return None
