"""Notifications from job transitions: who hears of what (scoping), payloads, nothing for a rolled-back
transition, the queued-too-long check once per queueing, and delivery with its log, retries and back-off
against a real local HTTP receiver and Django's in-memory mail backend."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from jobs.core.choices import Reason
from jobs.models import Job
from jobs.notifications.choices import DeliveryState, Event
from jobs.notifications.delivery import deliver
from jobs.notifications.models import Notification, Subscription
from jobs.notifications.services import (
    DELIVER_TASK,
    notifications_due,
    queued_too_long_record,
    subscription_create,
    subscription_update,
)
from jobs.notifications.signing import verify
from jobs.notifications.verification import subscription_verify, verification_token
from jobs.services.lifecycle import transition
from tenants.services import membership_remove, membership_set
from tests.factories import make_job, make_tenant, member
from tests.notifications.receiver import receiver

pytestmark = pytest.mark.django_db


def webhook(
    user: Any, tenant: Any, url: str = "http://127.0.0.1:9/hook", **fields: Any
) -> tuple[Subscription, str]:
    fields = {"name": "hook", "channel": "webhook", "url": url, "events": ["succeeded", "failed"]} | fields
    created = subscription_create(user=user, tenant=tenant, **fields)
    assert created.secret is not None
    return created.subscription, created.secret


def move(job: Job, *steps: str, reason: str = "Test") -> Job:
    for to in steps:
        with transaction.atomic():
            job = transition(Job.objects.select_for_update().get(pk=job.pk), to, reason=reason)
    return job


def test_a_finished_job_notifies_its_owner_and_the_tenant_but_no_one_else(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant, other = make_tenant(), make_tenant()
    owner, colleague = member(tenant, "owner"), member(tenant)
    outsider = member(other, "owner")
    mine, _ = webhook(owner, tenant)
    team, _ = webhook(owner, tenant, scope="tenant")
    webhook(colleague, tenant)  # another member's own jobs only
    webhook(outsider, other, scope="tenant")  # another tenant's
    webhook(owner, tenant, name="halts", events=["halted"])  # another event
    job = make_job(tenant, owner)
    with django_capture_on_commit_callbacks() as callbacks:
        move(job, "starting", "running", "succeeded")
    sent = Notification.objects.all()
    assert {n.subscription_id for n in sent} == {mine.pk, team.pk}
    assert {n.event for n in sent} == {"succeeded"}
    assert len(callbacks) >= 2  # the deliveries are queued on commit, beside the engine's own pushes


def test_payload_has_the_job_facts_and_no_spec_or_credentials() -> None:
    tenant = make_tenant("vision")
    owner = member(tenant)
    webhook(owner, tenant)
    job = make_job(tenant, owner, name="mnist", spec={"env": {"AWS_SECRET_ACCESS_KEY": "hunter2"}})
    move(job, "starting", "running")
    move(job, "failed", reason="OOMKilled")
    payload = Notification.objects.get().payload
    facts = payload["job"]
    assert payload["event"] == "failed" and "OOMKilled" in payload["text"]
    assert facts["id"] == job.pk and facts["name"] == "mnist" and facts["tenant"] == "vision"
    assert facts["state"] == "failed" and facts["reason"] == "OOMKilled" and facts["attempt"] == 0
    assert facts["url"] == f"http://testserver/jobs/{job.pk}/"
    assert facts["owner"] == owner.username and facts["finished_at"] and facts["created_at"]
    assert "hunter2" not in json.dumps(payload) and "spec" not in facts


def test_a_rolled_back_transition_stores_and_sends_nothing(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    webhook(owner, tenant, events=["failed"])
    job = make_job(tenant, owner)
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(RuntimeError), transaction.atomic():
        transition(Job.objects.select_for_update().get(pk=job.pk), "failed", reason="Test")
        raise RuntimeError("the rest of the service failed")
    assert not Notification.objects.exists() and callbacks == []


def test_preempted_fires_when_the_pods_are_told_to_stop_for_another_job_and_halted_when_halted() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    webhook(owner, tenant, events=["preempted", "halted"])
    preempted = move(make_job(tenant, owner), "starting", "running")
    move(preempted, "halting", reason=Reason.PREEMPTED)
    halted = move(make_job(tenant, owner), "starting", "running")
    move(halted, "halting", "halted", reason=Reason.HALTED_BY_USER)
    events = sorted(Notification.objects.values_list("job_id", "event"))
    assert events == sorted([(preempted.pk, "preempted"), (halted.pk, "halted")])


def test_a_former_member_hears_nothing_of_their_old_jobs() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    webhook(owner, tenant)
    job = make_job(tenant, owner)
    membership_remove(tenant=tenant, user=owner)
    membership_set(tenant=make_tenant(), user=owner, role="member")  # still a user elsewhere
    move(job, "starting", "running", "succeeded")
    assert not Notification.objects.exists()


def test_a_disabled_subscription_hears_nothing() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub, _ = webhook(owner, tenant)
    subscription_update(subscription=sub, enabled=False)
    move(make_job(tenant, owner), "starting", "running", "succeeded")
    assert not Notification.objects.exists()


def test_queued_too_long_fires_once_per_job_and_queueing() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    webhook(owner, tenant, events=["queued_too_long"], queued_minutes=5)
    now = timezone.now()
    job = make_job(tenant, owner, created_at=now - timedelta(minutes=10))
    make_job(tenant, owner, created_at=now)  # not yet
    assert queued_too_long_record(now=now) == 1
    assert queued_too_long_record(now=now + timedelta(minutes=1)) == 0  # once for this queueing
    first = Notification.objects.get()
    assert first.event == "queued_too_long" and first.job_id == job.pk
    assert "more than 5 minutes" in first.payload["text"] and first.payload["job"]["queued_since"]

    move(job, "starting")
    requeued = move(job, "requeued", reason=Reason.NODE_GONE)  # a second queueing starts now
    later = timezone.now()
    assert queued_too_long_record(now=later + timedelta(minutes=4)) == 0
    assert queued_too_long_record(now=later + timedelta(minutes=6)) == 2  # the second job, too, by now
    assert Notification.objects.filter(job=requeued).count() == 2


def _one(url: str, owner: Any, tenant: Any, **fields: Any) -> tuple[Notification, str]:
    _, secret = webhook(owner, tenant, url=url, **fields)
    move(make_job(tenant, owner), "starting", "running", "succeeded")
    return Notification.objects.get(), secret


def test_a_webhook_arrives_signed_and_the_attempt_is_logged() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        notification, secret = _one(hook.url, owner, tenant)
        outcome = deliver(notification.pk)
        (got,) = hook.wait_for(1)
    assert outcome is not None and outcome.status_code == 200 and outcome.error == ""
    assert got.headers["x-trainyard-event"] == "succeeded"
    assert verify(
        secret, got.headers["x-trainyard-timestamp"], got.body, got.headers["x-trainyard-signature"]
    )
    body = json.loads(got.body)
    assert body["id"] == notification.pk and body["job"]["state"] == "succeeded"
    notification.refresh_from_db()
    assert notification.state == DeliveryState.DELIVERED and notification.delivered_at is not None
    (attempt,) = notification.attempt_log.all()
    assert attempt.status_code == 200 and attempt.error == "" and attempt.next_retry_at is None
    assert deliver(notification.pk) is None  # delivered: a duplicate task sends nothing


@override_settings(NOTIFY_BACKOFF_SECONDS=30, NOTIFY_BACKOFF_MAX_SECONDS=3600, NOTIFY_MAX_ATTEMPTS=5)
def test_failures_are_retried_with_exponential_back_off_until_delivered(
    django_capture_on_commit_callbacks: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    queued: list[tuple[str, Any, Any]] = []
    monkeypatch.setattr(
        "jobs.notifications.services.current_app.send_task",
        lambda name, args=None, countdown=None: queued.append((name, args, countdown)),
    )
    with receiver(500, 503) as hook:
        notification, _ = _one(hook.url, owner, tenant)
        for expected_delay in (30, 60):
            with django_capture_on_commit_callbacks(execute=True):
                outcome = deliver(notification.pk)
            assert outcome is not None and outcome.error.startswith("HTTP 5")
            assert queued[-1] == (DELIVER_TASK, [notification.pk], expected_delay)
            assert deliver(notification.pk) is None  # not due yet
            Notification.objects.filter(pk=notification.pk).update(next_attempt_at=timezone.now())
        assert deliver(notification.pk) is not None
        hook.wait_for(3)
    log = list(notification.attempt_log.all())
    assert [(a.number, a.status_code, a.error) for a in log] == [
        (1, 500, "HTTP 500"),
        (2, 503, "HTTP 503"),
        (3, 200, ""),
    ]
    gaps = [(a.next_retry_at - a.at).total_seconds() for a in log[:2] if a.next_retry_at]
    assert gaps == [30, 60] and log[2].next_retry_at is None
    notification.refresh_from_db()
    assert notification.state == DeliveryState.DELIVERED and notification.attempts == 3


@override_settings(NOTIFY_BACKOFF_SECONDS=600, CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 180})
def test_a_retry_later_than_half_the_visibility_timeout_is_left_to_the_sweep(
    django_capture_on_commit_callbacks: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    queued: list[Any] = []
    monkeypatch.setattr("jobs.notifications.services.current_app.send_task", lambda *a, **k: queued.append(a))
    with receiver(500) as hook:
        notification, _ = _one(hook.url, owner, tenant)
        with django_capture_on_commit_callbacks(execute=True):
            deliver(notification.pk)
        hook.wait_for(1)
    notification.refresh_from_db()
    assert queued == [] and notification.state == DeliveryState.PENDING
    assert notification.next_attempt_at is not None
    assert notifications_due(now=notification.next_attempt_at) == [notification.pk]
    assert notifications_due() == []


@override_settings(NOTIFY_MAX_ATTEMPTS=2, NOTIFY_TIMEOUT_SECONDS=2)
def test_delivery_gives_up_after_the_last_attempt() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        url = hook.url
    notification, _ = _one(url, owner, tenant)  # nobody listens there any more
    for _ in range(2):
        Notification.objects.filter(pk=notification.pk).update(next_attempt_at=timezone.now())
        outcome = deliver(notification.pk)
        assert outcome is not None and "ConnectError" in outcome.error
    notification.refresh_from_db()
    assert notification.state == DeliveryState.FAILED and notification.next_attempt_at is None
    assert [a.next_retry_at is None for a in notification.attempt_log.all()] == [False, True]


def test_a_private_target_is_refused_again_at_delivery() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        notification, _ = _one(hook.url, owner, tenant)
        with override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False):
            outcome = deliver(notification.pk)
        assert hook.requests == []
    assert outcome is not None and outcome.error.startswith("refused: 127.0.0.1 resolves to 127.0.0.1")


def test_slack_gets_a_text_payload_with_the_job_link() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        created = subscription_create(
            user=owner, tenant=tenant, name="slack", channel="slack", url=hook.url, events=["succeeded"]
        )
        assert created.secret is None
        job = move(make_job(tenant, owner, name="bert"), "starting", "running", "succeeded")
        deliver(Notification.objects.get().pk)
        (got,) = hook.wait_for(1)
    body = json.loads(got.body)
    assert (
        set(body) == {"text"} and "bert" in body["text"] and f"/jobs/{job.pk}/|Open the job>" in body["text"]
    )
    assert "x-trainyard-signature" not in got.headers


def test_email_goes_through_djangos_mail_backend() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    created = subscription_create(
        user=owner, tenant=tenant, name="mail", channel="email", email="ml@example.com", events=["failed"]
    )
    sub = created.subscription
    subscription_verify(subscription=sub, token=verification_token(sub))
    job = move(make_job(tenant, owner, name="gpt"), "starting", "running")
    move(job, "failed", reason="OOMKilled")
    outcome = deliver(Notification.objects.get().pk)
    assert outcome is not None and outcome.error == ""
    (message,) = mail.outbox
    assert message.to == ["ml@example.com"] and message.subject == f"[Trainyard] gpt ({job.pk}): failed"
    assert "OOMKilled" in message.body and f"http://testserver/jobs/{job.pk}/" in message.body


def test_a_notification_for_a_since_disabled_subscription_is_skipped() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        notification, _ = _one(hook.url, owner, tenant)
        subscription_update(subscription=notification.subscription, enabled=False)
        deliver(notification.pk)
        assert hook.requests == []
    notification.refresh_from_db()
    assert notification.state == DeliveryState.SKIPPED
    assert notification.event == Event.SUCCEEDED


def test_the_connection_goes_to_the_address_it_checked_and_a_name_turned_private_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    answers = {"hooks.example.com": "93.184.216.34"}
    real = socket.getaddrinfo

    def lookup(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real(answers.get(host, host), port, *args, **kwargs)

    monkeypatch.setattr("jobs.notifications.targets.socket.getaddrinfo", lookup)
    with receiver() as hook, override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False):
        port = hook.url.split(":")[2].split("/")[0]
        notification, _ = _one(f"http://hooks.example.com:{port}/hook", owner, tenant)  # public when checked
        answers["hooks.example.com"] = "127.0.0.1"  # the name's answer changes (DNS rebinding)
        outcome = deliver(notification.pk)
        assert outcome is not None and "refused: hooks.example.com resolves to 127.0.0.1" in outcome.error
        assert hook.requests == []
        with override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=True):
            Notification.objects.filter(pk=notification.pk).update(next_attempt_at=timezone.now())
            outcome = deliver(notification.pk)  # allowed: it reaches the address the name resolved to
        (got,) = hook.wait_for(1)
    assert (
        outcome is not None
        and outcome.status_code == 200
        and got.headers["host"] == f"hooks.example.com:{port}"
    )


def test_the_beat_sweep_reports_queued_jobs_and_requeues_due_deliveries(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.notifications import tasks

    assert settings.CELERY_BEAT_SCHEDULE["notifications"]["task"] == "jobs.notifications.sweep"
    queued: list[int] = []
    monkeypatch.setattr(tasks.deliver, "delay", queued.append)
    tenant = make_tenant()
    owner = member(tenant)
    webhook(owner, tenant, events=["queued_too_long", "succeeded"], queued_minutes=1)
    make_job(tenant, owner, created_at=timezone.now() - timedelta(minutes=2))
    lost = move(make_job(tenant, owner), "starting", "running", "succeeded")  # its task never ran
    later = Notification.objects.create(
        subscription=Subscription.objects.get(), event="test", key="later", payload={},
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )  # fmt: skip
    assert tasks.sweep() == {"queued_too_long": 1, "due": 2}
    due = set(Notification.objects.filter(pk__in=queued).values_list("event", "job_id"))
    assert ("succeeded", lost.pk) in due and len(due) == 2 and later.pk not in queued


def test_a_deleted_jobs_notification_is_still_delivered_and_logged_with_its_id() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    with receiver() as hook:
        notification, _ = _one(hook.url, owner, tenant)
        job_id = notification.job_id
        Job.objects.filter(pk=job_id).delete()
        outcome = deliver(notification.pk)
        (got,) = hook.wait_for(1)
    assert outcome is not None and outcome.status_code == 200 and json.loads(got.body)["job"]["id"] == job_id
    notification.refresh_from_db()
    assert notification.job_id is None and notification.job_ref == job_id
