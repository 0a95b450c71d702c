"""The notifications' rows: subscriptions, the notifications they produced, and each delivery attempt.

Imported by jobs/models.py, so they belong to the jobs app and its migrations."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from jobs.notifications.choices import Channel, DeliveryState


class Subscription(models.Model):
    """Who hears what about which jobs, and where: a user's own jobs in one tenant (`user` set), or every
    job of the tenant (`user` empty; managed by the tenant's owners). A webhook's signing secret is kept
    sealed (jobs/credentials.py) and shown once, at creation."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="notify_subscriptions"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notify_subscriptions",
        help_text="Whose jobs it covers (and who manages it); empty: every job of the tenant.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=100)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    url = models.CharField(max_length=2000, blank=True, help_text="Webhook or Slack URL (http or https).")
    email = models.EmailField(blank=True, help_text="Where e-mail notifications go.")
    secret_sealed = models.TextField(blank=True, help_text="The webhook signing secret, sealed; never shown.")
    events: models.JSONField[Any] = models.JSONField(default=list, help_text="Event names it hears of.")
    queued_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="For queued_too_long: minutes a job may wait before it is reported."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    email_verified_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its manager opened the link sent to the e-mail address; until then nothing is sent "
        "there (jobs/notifications/verification.py).",
    )
    verification_sent_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last verification e-mail was queued (resends are spaced)."
    )

    class Meta:
        ordering = ["tenant", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.channel}, {self.tenant_id})"

    @property
    def scope(self) -> str:
        return "user" if self.user_id else "tenant"

    @property
    def verified(self) -> bool:
        """Whether it may send: webhooks and Slack always, an e-mail address once verified."""
        return self.channel != Channel.EMAIL or self.email_verified_at is not None

    @property
    def target(self) -> str:
        """Where it sends, as pages and the API show it: a Slack URL carries its credential in its path,
        so only its host is shown."""
        if self.channel == Channel.EMAIL:
            return self.email
        if self.channel == Channel.SLACK:
            scheme, _, rest = self.url.partition("://")
            return f"{scheme}://{rest.split('/', 1)[0]}/…"
        return self.url


class Notification(models.Model):
    """One event told to one subscription: its payload fixed when the event happened, delivered by
    `jobs.notifications.tasks.deliver` with retries; unique per subscription, event, job and occurrence
    (`key`), so an event is never queued twice."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="notifications")
    job = models.ForeignKey(
        "jobs.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Empty for a test, or once the job is deleted (its id stays in the payload).",
    )
    event = models.CharField(max_length=20)
    key = models.CharField(
        max_length=64, help_text="Which occurrence: the JobEvent id, or the queueing's start."
    )
    payload: models.JSONField[Any] = models.JSONField()
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who asked for it (a test); test sends are limited per user and per target.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "event", "job", "key"], name="unique_notification"
            )
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} of {self.job_ref or '-'} to {self.subscription_id} ({self.state})"

    @property
    def job_ref(self) -> str | None:
        """The job's id, also after the job was deleted (from the payload)."""
        job = self.payload.get("job") if isinstance(self.payload, dict) else None
        return self.job_id or (str(job["id"]) if isinstance(job, dict) and job.get("id") else None)


class DeliveryAttempt(models.Model):
    """One try at delivering a notification: when, what the target answered (or the error), and when the
    next try is due (empty when there is none)."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    next_retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["notification", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.notification_id}: {self.status_code or self.error[:40]}"

    @property
    def ok(self) -> bool:
        return not self.error
