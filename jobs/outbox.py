"""The task outbox: Celery tasks are written to PostgreSQL in the transaction that makes them necessary, and
sent to the broker from there, so a request never waits on a Redis that is down and no task is lost.

`enqueue` inserts an `OutboxTask` row beside the rows it concerns; once that transaction commits, the same
process sends it at once and deletes the row (the usual case: one short publish with no retries). When the
broker does not answer, the row stays, the request answers all the same, and later sends from this process
skip the broker for BROKER_DOWN_SECONDS instead of each failing in turn. Beat queues `jobs.tasks.outbox_drain`
every OUTBOX_DRAIN_SECONDS: once Redis is back, a worker runs it and sends what waited, oldest first, with
what is left of each countdown. Rows are taken with SKIP LOCKED (the sender and a drain never send one row
both), and a row is deleted only after its task was accepted, so a task is sent at least once; the tasks
are idempotent (they take ids and refuse stale input).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import DatabaseError, models, transaction
from django.utils import timezone

log = logging.getLogger(__name__)
BROKER_DOWN_SECONDS = 5.0
DRAIN_BATCH = 100
_broker_down_until = 0.0


class OutboxTask(models.Model):
    """A Celery task committed with the rows that called for it and not yet accepted by the broker."""

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    not_before = models.DateTimeField(help_text="when the task may run (its countdown, from enqueue)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "jobs"
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.task}{tuple(self.args)!r}"


def enqueue(task: str, *args: Any, countdown: float = 0) -> OutboxTask:
    """Queue Celery task `task` (by name, JSON arguments) with the current transaction: written now, sent
    once it commits (never before the rows exist), or by the drain if the broker is down then."""
    row = OutboxTask.objects.create(
        task=task, args=list(args), not_before=timezone.now() + timedelta(seconds=countdown)
    )
    transaction.on_commit(lambda: _send_committed(row.pk))
    return row


def outbox_drain() -> int:
    """Send every waiting task, oldest first, until the broker refuses one; how many were sent."""
    sent = 0
    while True:
        with transaction.atomic():
            rows = list(OutboxTask.objects.select_for_update(skip_locked=True)[:DRAIN_BATCH])
            done = []
            for row in rows:
                if not _publish(row, force=True):
                    break  # the broker refused: the rest waits for the next drain
                done.append(row.pk)
            OutboxTask.objects.filter(pk__in=done).delete()
        sent += len(done)
        if len(done) < DRAIN_BATCH:
            return sent


def _send_committed(pk: int) -> None:
    """After commit: send one task now unless the broker was just found down (the drain sends it then)."""
    if time.monotonic() < _broker_down_until:
        return
    try:
        with transaction.atomic():
            row = OutboxTask.objects.select_for_update(skip_locked=True).filter(pk=pk).first()
            if row is not None and _publish(row):
                row.delete()
    except DatabaseError:
        log.warning("outbox row %s not sent now; the drain will", pk, exc_info=True)


def _publish(row: OutboxTask, *, force: bool = False) -> bool:
    """One attempt to hand the task to the broker, no retries (the outbox is the retry); False if refused.
    A refusal marks the broker down for BROKER_DOWN_SECONDS, which only the drain (`force`) ignores."""
    global _broker_down_until
    if not force and time.monotonic() < _broker_down_until:
        return False
    countdown = max(0.0, (row.not_before - timezone.now()).total_seconds())
    try:
        current_app.send_task(row.task, args=row.args, countdown=countdown or None, retry=False)
    except Exception as exc:
        _broker_down_until = time.monotonic() + BROKER_DOWN_SECONDS
        log.warning("could not queue %s (%s); it waits in the outbox", row, exc)
        return False
    _broker_down_until = 0.0
    return True
