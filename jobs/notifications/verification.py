"""E-mail targets are verified before use: a new e-mail subscription gets one message with a signed link
that expires (NOTIFY_VERIFY_MAX_AGE_SECONDS); opening it, logged in as someone who manages the subscription,
verifies the address. Until then deliveries to it are skipped, so nobody can point job notifications (or
test sends) at an inbox that did not ask for them. The link signs the subscription and its address, so a
link for an address the row no longer holds verifies nothing."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from common.errors import Refused
from common.transactions import durable_service
from jobs.notifications.choices import Channel
from jobs.notifications.models import Subscription

log = logging.getLogger(__name__)

SALT = "trainyard.notifications.verify-email"
VERIFY_TASK = "jobs.notifications.send_verification"


def _signed_value(subscription: Subscription) -> str:
    """The subscription and (a digest of) its address: the link names no address in clear."""
    digest = hashlib.sha256(subscription.email.lower().encode()).hexdigest()[:24]
    return f"{subscription.pk}.{digest}"


def verification_token(subscription: Subscription) -> str:
    """The signed, timestamped token of the subscription's current address (it expires with max_age)."""
    return signing.TimestampSigner(salt=SALT).sign(_signed_value(subscription))


def verification_url(subscription: Subscription) -> str:
    """The link the e-mail carries, absolute when NOTIFY_BASE_URL is set."""
    path = reverse("notification-verify", args=[subscription.pk, verification_token(subscription)])
    return settings.NOTIFY_BASE_URL.rstrip("/") + path


@durable_service
def verification_queue(*, subscription: Subscription, force: bool = False) -> Subscription:
    """Queue the verification e-mail of an unverified e-mail subscription (sent on commit by a task).
    Refused: 400 when there is nothing to verify, 429 within NOTIFY_VERIFY_RESEND_SECONDS of the last one
    (unless `force`, for the first message at creation)."""
    row = Subscription.objects.select_for_update().get(pk=subscription.pk)
    if row.channel != Channel.EMAIL:
        raise Refused({"channel": ["only e-mail addresses are verified"]})
    if row.email_verified_at is not None:
        raise Refused({"email": [f"{row.email} is already verified"]})
    now = timezone.now()
    spacing = timedelta(seconds=settings.NOTIFY_VERIFY_RESEND_SECONDS)
    if not force and row.verification_sent_at is not None and now - row.verification_sent_at < spacing:
        wait = int((row.verification_sent_at + spacing - now).total_seconds()) + 1
        raise Refused(
            {"": [f"a verification e-mail was sent moments ago; try again in {wait} s"]}, status=429
        )
    row.verification_sent_at = now
    row.save(update_fields=["verification_sent_at"])

    def queue() -> None:
        try:
            current_app.send_task(VERIFY_TASK, args=[row.pk])
        except Exception:
            log.warning("could not queue the verification e-mail of subscription %s", row.pk, exc_info=True)

    transaction.on_commit(queue)
    return row


def verification_send(subscription_id: int) -> bool:
    """Send the verification e-mail (the task's body); False when there is nothing to send any more."""
    sub = Subscription.objects.select_related("tenant", "created_by").filter(pk=subscription_id).first()
    if sub is None or sub.channel != Channel.EMAIL or sub.email_verified_at is not None:
        return False
    days = settings.NOTIFY_VERIFY_MAX_AGE_SECONDS / 86400
    who = sub.created_by.get_username() if sub.created_by else "a user"
    text = (
        f"{who} asked Trainyard to send job notifications ({sub.name}, tenant {sub.tenant.slug}) to "
        f"{sub.email}.\n\nTo confirm, open this link while logged in to Trainyard (valid {days:g} days):\n"
        f"{verification_url(sub)}\n\nIf you did not expect this, ignore it: nothing is sent to this address "
        "until it is confirmed.\n"
    )
    subject = f"[Trainyard] Confirm notifications to {sub.email}"
    send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [sub.email], fail_silently=False)
    return True


@durable_service
def subscription_verify(*, subscription: Subscription, token: str) -> Subscription:
    """Mark the subscription's address verified if `token` is its current, unexpired link; Refused (400,
    field `token`) otherwise. The caller got the subscription through the selectors, so manages it."""
    row = Subscription.objects.select_for_update().get(pk=subscription.pk)
    try:
        value = signing.TimestampSigner(salt=SALT).unsign(
            token, max_age=settings.NOTIFY_VERIFY_MAX_AGE_SECONDS
        )
    except signing.SignatureExpired:
        raise Refused({"token": ["this verification link has expired; send a new one"]}) from None
    except signing.BadSignature:
        raise Refused({"token": ["this verification link is not valid"]}) from None
    if row.channel != Channel.EMAIL or value != _signed_value(row):
        raise Refused({"token": ["this verification link is not for this subscription's address"]})
    if row.email_verified_at is None:
        row.email_verified_at = timezone.now()
        row.save(update_fields=["email_verified_at"])
    return row
