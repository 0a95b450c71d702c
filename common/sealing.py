"""Secrets at rest: values sealed with Fernet before they touch the database.

What is sealed (a job's data-store credentials, a tenant's data-store secrets) is needed only when a pod is
launched, where it becomes a Secret in the tenant's namespace. The key comes from the environment
(`CREDENTIALS_KEY`, a Fernet key; several, comma-separated, rotate: the first seals, any opens). Without one
the key is derived from SECRET_KEY, so rotating SECRET_KEY makes sealed values unreadable; set
CREDENTIALS_KEY in production.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _fernet() -> MultiFernet:
    configured = [k.strip() for k in settings.CREDENTIALS_KEY.split(",") if k.strip()]
    if not configured:
        digest = hashlib.sha256(f"trainyard-credentials:{settings.SECRET_KEY}".encode()).digest()
        configured = [base64.urlsafe_b64encode(digest).decode()]
    try:
        return MultiFernet([Fernet(key) for key in configured])
    except ValueError as exc:
        raise ImproperlyConfigured("CREDENTIALS_KEY must be Fernet keys (32 url-safe base64 bytes)") from exc


def seal(value: Any) -> str:
    """Encrypt a JSON-able `value` into an opaque token for the database."""
    return _fernet().encrypt(json.dumps(value, sort_keys=True).encode()).decode()


def unseal(token: str) -> Any:
    """Decrypt a token from `seal`; ImproperlyConfigured if no configured key opens it."""
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken as exc:
        raise ImproperlyConfigured("stored credentials cannot be opened with CREDENTIALS_KEY") from exc
