"""Command-line sign-in by the OAuth device authorization grant (RFC 8628), for the platform's own API
tokens (`trainyard login --sso URL`, docs/sso.md).

The command line asks for a device code (`device_start`) and shows the user a URL and a short user code; the
user signs in on the portal (through the identity provider, or with a password where those are on), checks
the code and approves (`device_approve`) or denies; meanwhile the command line polls (`device_poll`) no
faster than the interval, and the first poll after the approval gets a new API token of the default scope
and expiry, once. Codes expire after DEVICE_CODE_MINUTES; a poll that comes too early is answered
`slow_down` and the interval grows by 5 seconds, as the RFC asks. One address holds at most
DEVICE_CODES_PER_ADDRESS codes waiting at once; codes a day past their expiry are deleted as new ones come."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from common.transactions import durable_service
from tenants.models import DeviceAuthorization
from tenants.tokens import token_create

# Letters without vowels or look-alikes (RFC 8628 section 6.1): no words, nothing to misread.
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
SLOW_DOWN_SECONDS = 5


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def user_code_normal(text: str) -> str:
    """A user code as typed (any case, with or without the dash or spaces) in its stored form XXXX-XXXX."""
    letters = "".join(ch for ch in text.upper() if ch in USER_CODE_ALPHABET)
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else ""


class DeviceRefused(Exception):
    """Too many codes wait for approval from one address."""


@durable_service
def device_start(*, client_name: str = "", address: str | None = None) -> tuple[DeviceAuthorization, str]:
    """A new device sign-in; returns the row and the device code (stored only as its digest). Refused
    (`DeviceRefused`) while `address` has DEVICE_CODES_PER_ADDRESS codes waiting."""
    now = timezone.now()
    DeviceAuthorization.objects.filter(expires_at__lt=now - timedelta(days=1)).delete()
    waiting = DeviceAuthorization.objects.filter(
        address=address, expires_at__gt=now, approved_at__isnull=True, denied_at__isnull=True
    )
    if address is not None and waiting.count() >= settings.DEVICE_CODES_PER_ADDRESS:
        raise DeviceRefused(f"{settings.DEVICE_CODES_PER_ADDRESS} sign-ins from this address wait already")
    device_code = secrets.token_urlsafe(32)
    while True:
        letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
        user_code = f"{letters[:4]}-{letters[4:]}"
        if not DeviceAuthorization.objects.filter(user_code=user_code).exists():
            break
    row = DeviceAuthorization.objects.create(
        device_digest=_digest(device_code),
        user_code=user_code,
        client_name=client_name[:100],
        address=address,
        expires_at=now + timedelta(minutes=settings.DEVICE_CODE_MINUTES),
        interval=settings.DEVICE_POLL_SECONDS,
    )
    return row, device_code


def device_pending(user_code: str) -> DeviceAuthorization | None:
    """The sign-in waiting for approval under `user_code` (as typed), or None (unknown, expired, decided)."""
    code = user_code_normal(user_code)
    if not code:
        return None
    return DeviceAuthorization.objects.filter(
        user_code=code,
        expires_at__gt=timezone.now(),
        approved_at__isnull=True,
        denied_at__isnull=True,
    ).first()


@durable_service
def device_decide(*, user_code: str, user: User, approve: bool) -> DeviceAuthorization | None:
    """`user` approves (or denies) the pending sign-in `user_code`; None when there is none to decide."""
    pending = device_pending(user_code)
    if pending is None:
        return None
    row = DeviceAuthorization.objects.select_for_update().get(pk=pending.pk)
    if row.approved_at or row.denied_at:
        return None
    row.user = user
    if approve:
        row.approved_at = timezone.now()
    else:
        row.denied_at = timezone.now()
    row.save(update_fields=["user", "approved_at", "denied_at"])
    return row


@dataclass(frozen=True)
class Poll:
    """A poll's answer: `error` as RFC 8628 names it (authorization_pending, slow_down, access_denied,
    expired_token, invalid_grant), or the new token's `secret` and row."""

    error: str = ""
    secret: str = ""
    interval: int = 0
    expires_at: str = ""
    scope: str = ""


@durable_service
def device_poll(*, device_code: str) -> Poll:
    """The command line asks whether its sign-in was approved; the first poll after the approval creates
    the API token (then the device code is spent)."""
    row = DeviceAuthorization.objects.select_for_update().filter(device_digest=_digest(device_code)).first()
    if row is None or row.consumed_at is not None:
        return Poll(error="invalid_grant")
    now = timezone.now()
    if row.expires_at <= now:
        return Poll(error="expired_token")
    if row.denied_at is not None:
        return Poll(error="access_denied")
    too_soon = row.polled_at is not None and (now - row.polled_at).total_seconds() < row.interval
    row.polled_at = now
    if too_soon:
        row.interval += SLOW_DOWN_SECONDS
        row.save(update_fields=["polled_at", "interval"])
        return Poll(error="slow_down", interval=row.interval)
    if row.approved_at is None or row.user is None:
        row.save(update_fields=["polled_at"])
        return Poll(error="authorization_pending", interval=row.interval)
    name = f"trainyard login --sso ({row.client_name})" if row.client_name else "trainyard login --sso"
    token, secret = token_create(user=row.user, name=name[:100])
    row.consumed_at = now
    row.token = token
    row.save(update_fields=["polled_at", "consumed_at", "token"])
    expires = token.expires_at.isoformat(timespec="seconds") if token.expires_at else ""
    return Poll(secret=secret, expires_at=expires, scope=token.scope)
