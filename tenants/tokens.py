"""API tokens: creation (the secret is returned once; a scope and an expiry, by default
API_TOKEN_DEFAULT_DAYS, at most API_TOKEN_MAX_DAYS), lookup by digest, revocation; the DRF authentication
class that reads `Authorization: Bearer ty_...` (an expired token is a 401 that says so), and the DRF
permission that holds a token to its scope."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from tenants.models import ApiToken, TokenScope

TOKEN_PREFIX = "ty_"  # noqa: S105 - a public marker, not a secret


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRefused(ValueError):
    """A token that may not be created; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


SCOPE_ORDER = (TokenScope.READ, TokenScope.SUBMIT, TokenScope.ADMIN)


def scope_covers(scope: str, needed: str) -> bool:
    """Whether a token of `scope` may do what needs `needed` (each scope includes the ones before it)."""
    return SCOPE_ORDER.index(TokenScope(scope)) >= SCOPE_ORDER.index(TokenScope(needed))


def token_create(
    *,
    user: User,
    name: str,
    scope: str = TokenScope.SUBMIT,
    expires_at: datetime | None = None,
    parent: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the secret, which is never stored or shown again.

    Without `expires_at` it expires API_TOKEN_DEFAULT_DAYS from now (never, when that is 0); an expiry more
    than API_TOKEN_MAX_DAYS ahead (when that is not 0) or already passed is refused (`TokenRefused`).
    `parent` is the token the request came with, if any: the new token expires no later than it does (its
    expiry when none is asked) and has no wider scope, so a token cannot mint a stronger one."""
    if scope not in TokenScope.values:
        raise TokenRefused("scope", f"choose one of {', '.join(TokenScope.values)}")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise TokenRefused("expires_at", "must be in the future")
    max_days = settings.API_TOKEN_MAX_DAYS
    if expires_at is not None and max_days and expires_at > now + timedelta(days=max_days):
        raise TokenRefused("expires_at", f"must be at most {max_days} days ahead (API_TOKEN_MAX_DAYS)")
    if parent is not None and not scope_covers(parent.scope, scope):
        raise TokenRefused(
            "scope", f"must not be wider than the scope of the token this request used ({parent.scope})"
        )
    if parent is not None and parent.expires_at is not None:
        if expires_at is None:
            expires_at = parent.expires_at
        elif expires_at > parent.expires_at:
            raise TokenRefused(
                "expires_at",
                f"must not be later than the expiry of the token this request used "
                f"({parent.expires_at.isoformat()})",
            )
    if expires_at is None and settings.API_TOKEN_DEFAULT_DAYS:
        expires_at = now + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, scope=scope, prefix=secret[:10], digest=_digest(secret), expires_at=expires_at
    )
    return token, secret


def token_revoke(*, token: ApiToken) -> None:
    """Revoke a token at once; revoking twice is harmless."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def token_refusal(token: ApiToken | None, *, now: datetime | None = None) -> str | None:
    """Why this token (looked up by its secret) does not authenticate, or None when it does."""
    now = now or timezone.now()
    if token is None:
        return "invalid, expired or revoked token"
    if token.revoked_at is not None:
        return "this token was revoked"
    if token.expires_at and token.expires_at <= now:
        return (
            f"this token expired at {token.expires_at.isoformat(timespec='seconds')}; "
            "create a new one (POST /api/v1/tokens/ or `manage.py token create`)"
        )
    if not token.user.is_active:
        return "this token's user is inactive"
    return None


def token_lookup(secret: str) -> ApiToken | None:
    """The token with this secret (its user loaded), live or not; None when there is none."""
    return ApiToken.objects.select_related("user").filter(digest=_digest(secret)).first()


def token_touch(token: ApiToken, *, now: datetime | None = None) -> None:
    """Record that a live token was used (at most once a minute, to spare the database a write per call)."""
    now = now or timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


def token_live(secret: str) -> ApiToken | None:
    """The live token with this secret (its user loaded), or None (unknown, revoked, expired or
    inactive user)."""
    token = token_lookup(secret)
    now = timezone.now()
    if token is None or token_refusal(token, now=now) is not None:
        return None
    token_touch(token, now=now)
    return token


def token_id_live(token_id: int, *, user_id: int) -> bool:
    """Whether token `token_id` of user `user_id` still authenticates: not revoked, not expired, its user
    active (for a connection that authenticated with it earlier)."""
    return (
        ApiToken.objects.filter(pk=token_id, user_id=user_id, revoked_at__isnull=True, user__is_active=True)
        .exclude(expires_at__lte=timezone.now())
        .exists()
    )


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication by `Authorization: Bearer <token>`."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        """The token's user, with the token itself as `request.auth`."""
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        secret = secret.strip()
        if not secret:
            raise exceptions.AuthenticationFailed("empty bearer token")
        token = token_lookup(secret)
        refusal = token_refusal(token)
        if token is None or refusal is not None:
            raise exceptions.AuthenticationFailed(refusal)
        token_touch(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class TokenScopePermission(permissions.BasePermission):
    """Holds a request made with an API token to the token's scope: `read` only safe methods; `submit`
    also the writes a view lists in `token_scopes` as `submit` (the job writes); `admin` every write. A
    view's `token_scopes` maps a method to the scope it needs; an unlisted write needs `admin`. Session
    requests are not limited (the role decides, as for every request)."""

    message = "this token's scope does not allow this request"

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        method = (request.method or "GET").upper()
        if method in permissions.SAFE_METHODS:
            needed: str = TokenScope.READ
        else:
            needed = getattr(view, "token_scopes", {}).get(method, TokenScope.ADMIN)
        if scope_covers(token.scope, needed):
            return True
        self.message = (
            f"this token's scope is {token.scope}: {method} {request.path} needs a token with scope {needed}"
        )
        return False
