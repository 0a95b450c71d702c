"""What a notification says: the JSON payload (fixed when the event happens), and the texts Slack and
e-mail get from it. Only the job's own public facts go in: never its spec, credentials or logs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from jobs.models import Job
from jobs.notifications.choices import TEST_EVENT, Event

SUMMARIES = {
    Event.SUCCEEDED: "succeeded",
    Event.FAILED: "failed",
    Event.PREEMPTED: "was preempted",
    Event.HALTED: "was halted",
    Event.QUEUED_TOO_LONG: "has been queued for more than {minutes} minutes",
    Event.IDLE_GPU: "has idle GPUs",
}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def job_url(job_id: str) -> str:
    """The job page's address, absolute when NOTIFY_BASE_URL is set (it should be, in production)."""
    return settings.NOTIFY_BASE_URL.rstrip("/") + reverse("job-detail", args=[job_id])


def job_payload(
    job: Job,
    *,
    event: str,
    occurred_at: datetime,
    queued_since: datetime | None = None,
    minutes: int = 0,
    detail: str = "",
) -> dict[str, Any]:
    """The payload of `event` about `job`, as every channel's message is made from it (`detail`: what an
    event that is no transition says, such as idle GPUs' numbers)."""
    facts: dict[str, Any] = {
        "id": job.pk,
        "name": job.name,
        "tenant": job.tenant.slug,
        "owner": job.owner.get_username() if job.owner else None,
        "state": job.status,
        "reason": job.reason,
        "message": job.message,
        "url": job_url(job.pk),
        "attempt": job.attempt,
        "created_at": _iso(job.created_at),
        "admitted_at": _iso(job.admitted_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }
    if queued_since is not None:
        facts["queued_since"] = _iso(queued_since)
    what = SUMMARIES[Event(event)].format(minutes=minutes)
    text = f"Job {job.name} ({job.pk}) in {job.tenant.slug} {what}"
    if event == Event.IDLE_GPU:
        text += f": {detail}" if detail else ""
    elif job.reason and event != Event.QUEUED_TOO_LONG:
        text += f": {job.reason}" + (f" — {job.message}" if job.message else "")
    return {"event": event, "occurred_at": _iso(occurred_at), "text": text, "job": facts}


def test_payload(*, tenant: str, name: str, occurred_at: datetime) -> dict[str, Any]:
    """What "send a test" sends: the same envelope, with no job."""
    text = f"Test notification from Trainyard for subscription {name!r} in {tenant}"
    return {"event": TEST_EVENT, "occurred_at": _iso(occurred_at), "text": text, "job": None}


def envelope(payload: dict[str, Any], *, notification_id: int, subscription_id: int) -> bytes:
    """The webhook body: the payload with the ids a receiver may deduplicate on, compact JSON (these exact
    bytes are signed)."""
    body = {"id": notification_id, "subscription": subscription_id, **payload}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def slack_body(payload: dict[str, Any]) -> bytes:
    """A Slack-compatible body: `{"text": ...}` with a link to the job page."""
    text = payload["text"]
    job = payload.get("job")
    if job:
        text += f" <{job['url']}|Open the job>"
    return json.dumps({"text": text}).encode()


def email_message(payload: dict[str, Any]) -> tuple[str, str]:
    """The subject and plain-text body of an e-mail notification."""
    job = payload.get("job")
    subject = "[Trainyard] " + (f"{job['name']} ({job['id']}): {payload['event']}" if job else "test")
    lines = [payload["text"], ""]
    if job:
        lines += [f"{key}: {job[key]}" for key in ("tenant", "state", "reason", "attempt", "url") if job[key]]
        lines += [f"{key}: {job[key]}" for key in ("created_at", "started_at", "finished_at") if job[key]]
    return subject, "\n".join(lines) + "\n"
