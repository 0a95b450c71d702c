"""API tokens: creation (the secret is returned once), lookup by digest, revocation; and the DRF
authentication class that reads `Authorization: Bearer ty_...`."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiToken

TOKEN_PREFIX = "ty_"  # noqa: S105 - a public marker, not a secret


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRefused(ValueError):
    """A token that may not be created; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def token_create(
    *, user: User, name: str, expires_at: datetime | None = None, parent: ApiToken | None = None
) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the secret, which is never stored or shown again.

    `parent` is the token the request came with, if any: the new token expires no later than it does (its
    expiry when none is asked), so a short-lived token cannot mint a longer-lived one. An expiry that has
    already passed is refused (`TokenRefused`)."""
    if expires_at is not None and expires_at <= timezone.now():
        raise TokenRefused("expires_at", "must be in the future")
    if parent is not None and parent.expires_at is not None:
        if expires_at is None:
            expires_at = parent.expires_at
        elif expires_at > parent.expires_at:
            raise TokenRefused(
                "expires_at",
                f"must not be later than the expiry of the token this request used "
                f"({parent.expires_at.isoformat()})",
            )
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=secret[:10], digest=_digest(secret), expires_at=expires_at
    )
    return token, secret


def token_revoke(*, token: ApiToken) -> None:
    """Revoke a token at once; revoking twice is harmless."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def token_live(secret: str) -> ApiToken | None:
    """The live token with this secret (its user loaded), or None (unknown, revoked, expired or
    inactive user)."""
    token = ApiToken.objects.select_related("user").filter(digest=_digest(secret)).first()
    now = timezone.now()
    if token is None or token.revoked_at is not None or (token.expires_at and token.expires_at <= now):
        return None
    if not token.user.is_active:
        return None
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
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
        token = token_live(secret)
        if token is None:
            raise exceptions.AuthenticationFailed("invalid, expired or revoked token")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
