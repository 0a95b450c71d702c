"""A job's data-store credentials at rest: sealed with Fernet (common.sealing) before they touch the database.

A job's credentials (from an FfDL manifest's `data_stores`, or its tenant's data-store secrets that the
spec names) are needed only at launch, where they become a Secret in the tenant's namespace. Until then the
manifest's sit in `JobCredentials.sealed` and the tenant's in `TenantSecret.sealed`; the key and its
rotation are common.sealing's (`CREDENTIALS_KEY`).
"""

from __future__ import annotations

from common import sealing

Credentials = dict[str, dict[str, str]]


def seal(credentials: Credentials) -> str:
    """Encrypt `credentials` (store id → field → value) into an opaque token for the database."""
    return sealing.seal(credentials)


def unseal(token: str) -> Credentials:
    """Decrypt a token from `seal`; ImproperlyConfigured if no configured key opens it."""
    data: Credentials = sealing.unseal(token)
    return data
