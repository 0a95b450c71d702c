"""Webhook signatures: HMAC-SHA256 of `timestamp + "." + body` with the subscription's secret, sent as
`X-Trainyard-Signature: sha256=<hex>` beside `X-Trainyard-Timestamp` (docs/notifications.md shows a
receiver's check). The timestamp inside the signed text lets a receiver refuse replays of old bodies."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-Trainyard-Signature"
TIMESTAMP_HEADER = "X-Trainyard-Timestamp"
EVENT_HEADER = "X-Trainyard-Event"
DELIVERY_HEADER = "X-Trainyard-Delivery"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)


def new_secret() -> str:
    """A fresh signing secret (32 random bytes, URL-safe)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The header value: `sha256=` and the hex HMAC-SHA256 of `timestamp.body` under `secret`."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """Whether `header` is the signature of `body` sent at `timestamp` (compared in constant time)."""
    return hmac.compare_digest(signature(secret, timestamp, body), header)
