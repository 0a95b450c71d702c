"""The Tokens page: every user lists, creates and revokes their own API tokens (for the CLI and scripts).

A new token's secret is shown once, in the answer to the POST that made it, with `Cache-Control: no-store`;
it is not put in the session for a redirect, so it is never stored anywhere, as the API and
`manage.py token create` do it. Creation and revocation go through `tenants.tokens`, the API's services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from tenants.models import ApiToken, TokenScope
from tenants.pages import page_user, render_page
from tenants.tokens import TokenRefused, token_create, token_revoke


def _state(token: ApiToken) -> str:
    if token.revoked_at:
        return "revoked"
    if token.expires_at and token.expires_at <= timezone.now():
        return "expired"
    return "active"


def _page(request: HttpRequest, context: dict[str, Any] | None = None, *, status: int = 200) -> HttpResponse:
    tokens = [(t, _state(t)) for t in ApiToken.objects.filter(user=page_user(request))]
    base = {
        "tokens": tokens,
        "scopes": TokenScope.choices,
        "default_days": settings.API_TOKEN_DEFAULT_DAYS,
        "max_days": settings.API_TOKEN_MAX_DAYS,
        "form": {"name": "", "scope": TokenScope.SUBMIT, "expires_in_days": ""},
        "api_url": request.build_absolute_uri("/api/v1/"),
    }
    response = render_page(request, "portal/tokens.html", base | (context or {}), status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@login_required
def tokens_page(request: HttpRequest) -> HttpResponse:
    """Your API tokens (never their secrets) and the form to create one."""
    return _page(request)


def _expiry(raw: str) -> Any:
    """The expiry the form asks for: blank is the service's default; else a whole number of days ahead."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        days = int(raw)
    except ValueError:
        raise TokenRefused("expires_in_days", "must be a whole number of days") from None
    if days < 1:
        raise TokenRefused("expires_in_days", "must be at least 1 day")
    if settings.API_TOKEN_MAX_DAYS and days > settings.API_TOKEN_MAX_DAYS:
        raise TokenRefused(
            "expires_in_days", f"must be at most {settings.API_TOKEN_MAX_DAYS} days (API_TOKEN_MAX_DAYS)"
        )
    return timezone.now() + timedelta(days=days)


@require_POST
@login_required
def token_create_view(request: HttpRequest) -> HttpResponse:
    """Create a token; the answer shows its secret this once (a refused form comes back with its error)."""
    form = {
        "name": request.POST.get("name", "").strip(),
        "scope": request.POST.get("scope", TokenScope.SUBMIT),
        "expires_in_days": request.POST.get("expires_in_days", "").strip(),
    }
    try:
        if not form["name"]:
            raise TokenRefused("name", "give the token a name, to tell it apart later")
        if len(form["name"]) > 100:
            raise TokenRefused("name", "at most 100 characters")
        expires_at = _expiry(form["expires_in_days"])
        token, secret = token_create(
            user=page_user(request), name=form["name"], scope=form["scope"], expires_at=expires_at
        )
    except TokenRefused as exc:
        return _page(request, {"form": form, "error": (exc.field, str(exc))}, status=400)
    return _page(request, {"new_token": token, "secret": secret}, status=201)


@require_POST
@login_required
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of your tokens at once; another user's token is 404."""
    token = ApiToken.objects.filter(user=page_user(request), pk=token_id).first()
    if token is None:
        raise Http404("no such token")
    token_revoke(token=token)
    messages.success(request, f"Token {token.name} ({token.prefix}…) revoked; it no longer authenticates.")
    return redirect("tokens")
