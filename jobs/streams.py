"""Live updates for browsers: the one helper that sends to a job's Channels group after a commit.

Consumers (jobs/consumers.py) only authenticate, authorize a subscription and forward what arrives here.
Redis holds nothing that matters: a viewer that misses a message backfills from PostgreSQL by sequence.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def job_group(job_id: str) -> str:
    """The Channels group of one job's viewers."""
    return f"job.{job_id}"


def tenant_group(tenant_slug: str) -> str:
    """The Channels group of everyone watching a tenant's job list."""
    return f"tenant.{tenant_slug}"


def send_after_commit(group: str, message: dict[str, Any]) -> None:
    """Send `message` to `group` once the current transaction commits (at once outside one).

    A broken layer never breaks the caller: the database already holds the truth.
    """

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group, {"type": "job.message", "payload": message})
        except Exception:
            log.warning("could not publish to %s", group, exc_info=True)

    transaction.on_commit(send)
