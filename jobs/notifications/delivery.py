"""One delivery attempt over a subscription's channel: a signed webhook POST, a Slack-compatible POST, or
an e-mail through Django's mail backend. Webhooks go through `targets.GuardedBackend` (no private address,
no proxy, no redirect followed) with NOTIFY_TIMEOUT_SECONDS for each phase."""

from __future__ import annotations

import logging
import time

import httpcore
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.mail import send_mail

from jobs.notifications import signing
from jobs.notifications.choices import Channel
from jobs.notifications.models import Notification
from jobs.notifications.payloads import email_message, envelope, slack_body
from jobs.notifications.services import (
    Outcome,
    notification_claim,
    notification_record,
    subscription_secret,
)
from jobs.notifications.targets import GuardedBackend, TargetRefused

log = logging.getLogger(__name__)
USER_AGENT = "Trainyard-Notifications/1"


def webhook_request(notification: Notification, *, now: float | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a notification's webhook POST (signed when it is a generic webhook)."""
    sub = notification.subscription
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if sub.channel == Channel.SLACK:
        return slack_body(notification.payload), headers
    body = envelope(notification.payload, notification_id=notification.pk, subscription_id=sub.pk)
    timestamp = str(int(now if now is not None else time.time()))
    headers |= {
        signing.TIMESTAMP_HEADER: timestamp,
        signing.SIGNATURE_HEADER: signing.signature(subscription_secret(sub), timestamp, body),
        signing.EVENT_HEADER: notification.event,
        signing.DELIVERY_HEADER: str(notification.pk),
    }
    return body, headers


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` to `url`; the response's status (its body is not read)."""
    timeout = float(settings.NOTIFY_TIMEOUT_SECONDS)
    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    with (
        httpcore.ConnectionPool(network_backend=GuardedBackend(), retries=0) as pool,
        pool.stream(
            "POST", url, headers=list(headers.items()), content=body, extensions={"timeout": limits}
        ) as response,
    ):
        return int(response.status)


def send(notification: Notification) -> Outcome:
    """Make one attempt; never raises for the target's failures (they are the outcome)."""
    sub = notification.subscription
    started = time.monotonic()
    status = None
    try:
        if sub.channel == Channel.EMAIL:
            subject, text = email_message(notification.payload)
            send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [sub.email], fail_silently=False)
            error = ""
        else:
            body, headers = webhook_request(notification)
            status = _post(sub.url, body, headers)
            error = "" if 200 <= status < 300 else f"HTTP {status}"
    except SoftTimeLimitExceeded:
        raise
    except TargetRefused as exc:
        error = f"refused: {exc}"
    except Exception as exc:  # the target's network, TLS or mail server failed: logged as this attempt
        error = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return Outcome(status_code=status, error=error, duration_ms=int((time.monotonic() - started) * 1000))


def deliver(notification_id: int) -> Outcome | None:
    """Claim the notification, attempt it (unless its subscription was disabled meanwhile, or its e-mail
    address is not verified: skipped) and record the attempt; None when it was not due (delivered, taken
    by another worker, or not yet)."""
    notification = notification_claim(notification_id)
    if notification is None:
        return None
    sub = notification.subscription
    if not sub.enabled and notification.event != "test":
        outcome = Outcome(error="the subscription was disabled", skipped=True)
    elif not sub.verified:
        outcome = Outcome(error=f"{sub.email} is not verified yet: nothing is sent to it", skipped=True)
    else:
        outcome = send(notification)
    notification_record(notification_id=notification_id, outcome=outcome)
    if outcome.error:
        log.info("notification %s to subscription %s: %s", notification_id, sub.pk, outcome.error)
    return outcome
