"""What the API server writes into an object's metadata on its own: timestamps and generated names.

Its own module because every writer needs them (the object API, deletion, controllers, the kubelet's
status updates, events), and none of those should import the whole object API for two helpers.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime

_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_iso(offset: float = 0.0) -> str:
    """The current time (plus ``offset`` seconds) as the apiserver writes timestamps (RFC 3339, seconds,
    UTC)."""
    return datetime.fromtimestamp(time.time() + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(length: int = 5) -> str:
    """Random name suffix like the apiserver's generateName."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))
