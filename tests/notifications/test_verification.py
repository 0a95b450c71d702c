"""E-mail targets are verified by a link before anything is sent to them: one verification e-mail at
creation with a signed, expiring link; until it is opened (logged in as someone who manages the
subscription) job notifications and test sends are skipped, and the pages and API say "unverified" with a
way to resend the link."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.core import mail
from django.test import Client, override_settings
from django.utils import timezone

from jobs.notifications import verification
from jobs.notifications.choices import DeliveryState
from jobs.notifications.delivery import deliver
from jobs.notifications.models import Notification, Subscription
from jobs.notifications.services import subscription_create, subscription_test
from jobs.notifications.verification import VERIFY_TASK, verification_send, verification_token
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

MAIL: dict[str, Any] = {"name": "mail", "channel": "email", "email": "ml@example.com", "events": ["failed"]}


@pytest.fixture(autouse=True)
def tasks_run_at_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, list[Any]]]]:
    """The verification task runs as soon as it is queued (on commit), as a worker would run it."""
    queued: list[tuple[str, list[Any]]] = []

    def send_task(name: str, args: list[Any]) -> None:
        queued.append((name, args))
        assert name == VERIFY_TASK
        verification_send(*args)

    monkeypatch.setattr(verification.current_app, "send_task", send_task)
    yield queued


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create(user: Any, tenant: Any, capture: Callable[..., Any], **fields: Any) -> Subscription:
    with capture(execute=True):
        return subscription_create(user=user, tenant=tenant, **(MAIL | fields)).subscription


def link_in(message: Any) -> str:
    match = re.search(r"https?://\S+|/notifications/\S+", message.body)
    assert match, message.body
    return match.group(0).removeprefix("http://testserver")


def test_a_new_address_gets_one_verification_email_and_nothing_else_until_verified(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub = create(owner, tenant, django_capture_on_commit_callbacks)
    (message,) = mail.outbox
    assert (
        message.to == ["ml@example.com"]
        and message.subject == "[Trainyard] Confirm notifications to ml@example.com"
    )
    assert f"/notifications/{sub.pk}/verify/" in message.body and "valid 3 days" in message.body
    assert not sub.verified

    with django_capture_on_commit_callbacks(execute=True):
        test = subscription_test(subscription=sub, user=owner)
    outcome = deliver(test.pk)
    assert outcome is not None and outcome.skipped and "ml@example.com is not verified yet" in outcome.error
    test.refresh_from_db()
    assert test.state == DeliveryState.SKIPPED
    assert len(mail.outbox) == 1, "no test e-mail to an unverified address"


def test_opening_the_link_as_the_owner_verifies_the_address_and_mail_flows(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub = create(owner, tenant, django_capture_on_commit_callbacks)
    link = link_in(mail.outbox[0])
    response = browser(owner).get(link, follow=True)
    assert response.status_code == 200 and "ml@example.com is verified" in response.content.decode()
    sub.refresh_from_db()
    assert sub.verified and sub.email_verified_at is not None
    test = subscription_test(subscription=sub, user=owner)
    outcome = deliver(test.pk)
    assert outcome is not None and outcome.error == "" and mail.outbox[-1].subject == "[Trainyard] test"


def test_someone_else_opening_the_link_gets_404_and_verifies_nothing(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner, colleague = member(tenant), member(tenant)
    sub = create(owner, tenant, django_capture_on_commit_callbacks)
    assert browser(colleague).get(link_in(mail.outbox[0])).status_code == 404
    assert Client().get(link_in(mail.outbox[0])).status_code == 302, "to the login page"
    sub.refresh_from_db()
    assert not sub.verified


def test_an_expired_tampered_or_stale_link_is_refused_with_a_reason(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub = create(owner, tenant, django_capture_on_commit_callbacks)
    client = browser(owner)
    with override_settings(NOTIFY_VERIFY_MAX_AGE_SECONDS=-1):  # the link's age is past any limit
        expired = client.get(link_in(mail.outbox[0]))
    assert expired.status_code == 400 and "this verification link has expired" in expired.content.decode()
    tampered = client.get(f"/notifications/{sub.pk}/verify/{verification_token(sub)}x/")
    assert tampered.status_code == 400 and "this verification link is not valid" in tampered.content.decode()
    token = verification_token(sub)
    Subscription.objects.filter(pk=sub.pk).update(email="other@example.com")  # e.g. changed in the admin
    stale = client.get(f"/notifications/{sub.pk}/verify/{token}/")
    assert stale.status_code == 400 and "not for this subscription&#x27;s address" in stale.content.decode()
    sub.refresh_from_db()
    assert not sub.verified


@override_settings(NOTIFY_VERIFY_RESEND_SECONDS=60)
def test_the_pages_and_api_show_unverified_and_resend_the_link_no_more_than_once_a_minute(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub = create(owner, tenant, django_capture_on_commit_callbacks)
    client = browser(owner)
    for page in (client.get("/notifications/"), client.get(f"/notifications/{sub.pk}/")):
        html = page.content.decode()
        assert "unverified" in html and f'action="/notifications/{sub.pk}/verify/"' in html
    assert client.get(f"/api/v1/notifications/{sub.pk}/").json()["verified"] is False

    too_soon = client.post(f"/api/v1/notifications/{sub.pk}/verify/")
    assert too_soon.status_code == 429 and "try again in" in too_soon.json()["detail"]
    Subscription.objects.filter(pk=sub.pk).update(verification_sent_at=timezone.now() - timedelta(seconds=61))
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(f"/api/v1/notifications/{sub.pk}/verify/")
    assert again.status_code == 202 and len(mail.outbox) == 2
    browser(owner).get(link_in(mail.outbox[1]))
    assert client.get(f"/api/v1/notifications/{sub.pk}/").json()["verified"] is True
    done = client.post(f"/api/v1/notifications/{sub.pk}/verify/")
    assert done.status_code == 400 and "already verified" in done.json()["detail"]


def test_webhooks_need_no_verification() -> None:
    tenant = make_tenant()
    owner = member(tenant)
    sub = subscription_create(
        user=owner,
        tenant=tenant,
        name="hook",
        channel="webhook",
        url="http://127.0.0.1:9/h",
        events=["failed"],
    ).subscription
    assert sub.verified and not mail.outbox
    assert Notification.objects.count() == 0


def test_the_migration_marks_existing_email_subscriptions_verified() -> None:
    migration = importlib.import_module("jobs.migrations.0018_email_verification")
    tenant = make_tenant()
    owner = member(tenant)
    sub = subscription_create(user=owner, tenant=tenant, **MAIL).subscription
    Subscription.objects.filter(pk=sub.pk).update(email_verified_at=None)
    migration.existing_addresses_verified(django_apps, None)
    sub.refresh_from_db()
    assert sub.verified and sub.email_verified_at == sub.created_at
