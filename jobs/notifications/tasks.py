"""Celery tasks of the notifications (thin, id-taking): one delivery attempt, the periodic sweep that
reports jobs queued too long and queues pending deliveries whose task was lost, and an e-mail address's
verification message."""

from __future__ import annotations

from celery import shared_task

from jobs.notifications.delivery import deliver as deliver_one
from jobs.notifications.services import notifications_due, queued_too_long_record
from jobs.notifications.verification import VERIFY_TASK, verification_send


@shared_task(name="jobs.notifications.deliver", acks_late=True, soft_time_limit=60, time_limit=90)
def deliver(notification_id: int) -> dict[str, object]:
    """One attempt at a notification; failures schedule the next attempt themselves (with back-off)."""
    outcome = deliver_one(notification_id)
    if outcome is None:
        return {"attempted": False}
    return {"attempted": True, "status": outcome.status_code, "error": outcome.error}


@shared_task(name="jobs.notifications.sweep", acks_late=True, soft_time_limit=60, time_limit=90)
def sweep() -> dict[str, int]:
    """Report jobs queued longer than their subscriptions allow, and queue every due pending delivery."""
    queued = queued_too_long_record()
    due = notifications_due()
    for pk in due:
        deliver.delay(pk)
    return {"queued_too_long": queued, "due": len(due)}


@shared_task(name=VERIFY_TASK, acks_late=True, soft_time_limit=60, time_limit=90)
def send_verification(subscription_id: int) -> dict[str, bool]:
    """Send the verification e-mail of an e-mail subscription (nothing once it is verified or gone)."""
    return {"sent": verification_send(subscription_id)}
