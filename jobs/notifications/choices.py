"""The notifications' vocabulary: channels, the events a subscription picks, and a notification's states."""

from __future__ import annotations

from django.db import models

from jobs.core.choices import JobStatus, Reason


class Channel(models.TextChoices):
    """Where a subscription sends its notifications."""

    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack-compatible webhook"
    EMAIL = "email", "E-mail"


class Event(models.TextChoices):
    """What a subscription may ask to hear about (`test` is what "send a test" sends, never subscribed)."""

    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    PREEMPTED = "preempted", "Preempted"
    HALTED = "halted", "Halted"
    QUEUED_TOO_LONG = "queued_too_long", "Queued longer than N minutes"
    IDLE_GPU = "idle_gpu", "GPUs idle"


TEST_EVENT = "test"
SUBSCRIBABLE = tuple(Event.values)


class DeliveryState(models.TextChoices):
    """Where one notification is: waiting for its next attempt, delivered, given up, or not sent because
    its subscription was disabled meanwhile."""

    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


class Scope(models.TextChoices):
    """Whose jobs a subscription covers."""

    USER = "user", "My jobs"
    TENANT = "tenant", "Every job of the tenant"


def event_for_transition(to: str, reason: str) -> str | None:
    """The event a job's move to `to` (for `reason`) is, or None when no subscription hears of it: a job is
    preempted when its pods are told to stop for another job (halting, reason Preempted)."""
    if to == JobStatus.SUCCEEDED:
        return Event.SUCCEEDED
    if to == JobStatus.FAILED:
        return Event.FAILED
    if to == JobStatus.HALTED:
        return Event.HALTED
    if to == JobStatus.HALTING and reason == Reason.PREEMPTED:
        return Event.PREEMPTED
    return None
