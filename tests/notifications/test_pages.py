"""The notifications pages: create from the form (the secret shown once), field errors, enable/disable,
test, delete, the delivery log, the tenant page's section for owners, and 404 for anyone else's."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from jobs.notifications.models import Notification, Subscription
from jobs.notifications.services import subscription_create, subscription_secret, subscription_test
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db

FORM: dict[str, Any] = {
    "scope": "user", "name": "ci", "channel": "webhook", "url": "http://127.0.0.1:9/hook",
    "events": ["succeeded", "failed"],
}  # fmt: skip


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_form_creates_a_webhook_and_shows_its_secret_once() -> None:
    tenant = make_tenant()
    user = member(tenant)
    client = browser(user)
    assert b"Notifications" in client.get("/").content  # in the user menu
    response = client.post("/notifications/", {"tenant": tenant.slug, **FORM})
    sub = Subscription.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/notifications/{sub.pk}/"
    secret = subscription_secret(sub)
    shown = client.get(response["Location"])
    assert secret in shown.content.decode() and sub.events == ["succeeded", "failed"]
    assert shown["Cache-Control"] == "no-store"
    assert secret not in client.get(f"/notifications/{sub.pk}/").content.decode()
    assert secret not in str(dict(client.session))  # it waited in the session sealed, and is gone
    listed = client.get("/notifications/").content.decode()
    assert f'data-subscription-id="{sub.pk}"' in listed and secret not in listed


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
def test_a_private_url_is_a_field_error_on_the_form() -> None:
    tenant = make_tenant()
    response = browser(member(tenant)).post("/notifications/", {"tenant": tenant.slug, **FORM})
    assert response.status_code == 400
    assert "not allowed as webhook targets" in response.content.decode()
    assert not Subscription.objects.exists()


def test_a_member_may_not_create_one_for_every_job() -> None:
    tenant = make_tenant()
    response = browser(member(tenant)).post(
        "/notifications/", {"tenant": tenant.slug, **FORM, "scope": "tenant"}
    )
    assert response.status_code == 403 and not Subscription.objects.exists()


def test_toggle_test_and_delete_from_the_page() -> None:
    tenant = make_tenant()
    user = member(tenant)
    sub = subscription_create(
        user=user, tenant=tenant, **{k: v for k, v in FORM.items() if k != "scope"}
    ).subscription
    client = browser(user)
    client.post(f"/notifications/{sub.pk}/toggle/")
    sub.refresh_from_db()
    assert sub.enabled is False
    client.post(f"/notifications/{sub.pk}/test/")
    assert Notification.objects.get().event == "test"
    page = client.get(f"/notifications/{sub.pk}/").content.decode()
    assert "not tried yet" in page and "Enable" in page
    assert client.post(f"/notifications/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()


def test_anyone_elses_subscription_is_a_404() -> None:
    tenant, other = make_tenant(), make_tenant()
    owner = member(tenant, "owner")
    fields = {k: v for k, v in FORM.items() if k != "scope"}
    mine = subscription_create(user=owner, tenant=tenant, **fields).subscription
    team = subscription_create(user=owner, tenant=tenant, scope="tenant", **fields).subscription
    for stranger in (member(tenant), member(other, "owner")):
        client = browser(stranger)
        for sub in (mine, team):
            assert client.get(f"/notifications/{sub.pk}/").status_code == 404
            for action in ("toggle", "test", "delete"):
                assert client.post(f"/notifications/{sub.pk}/{action}/").status_code == 404
    assert Subscription.objects.count() == 2 and not Notification.objects.exists()


def test_the_tenant_page_lists_its_notifications_for_owners_only() -> None:
    tenant = make_tenant()
    owner, colleague = member(tenant, "owner"), member(tenant)
    fields = {k: v for k, v in FORM.items() if k != "scope"}
    subscription_create(user=owner, tenant=tenant, scope="tenant", **(fields | {"name": "team-hook"}))
    page = browser(owner).get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'id="tenant-notifications"' in page and "team-hook" in page
    page = browser(colleague).get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'id="tenant-notifications"' not in page and "team-hook" not in page


def test_the_admin_console_lists_subscriptions_and_notifications_without_secrets(client: Client) -> None:
    tenant = make_tenant()
    user = member(tenant)
    fields = {k: v for k, v in FORM.items() if k != "scope"}
    created = subscription_create(user=user, tenant=tenant, **fields)
    client.force_login(make_user(username="root", is_staff=True, is_superuser=True))
    for url in ("/admin/jobs/subscription/", f"/admin/jobs/subscription/{created.subscription.pk}/change/"):
        page = client.get(url)
        assert page.status_code == 200 and "ci" in page.content.decode()
        assert str(created.secret) not in page.content.decode()
        assert created.subscription.secret_sealed not in page.content.decode()
    sent = subscription_test(subscription=created.subscription, user=user)
    assert client.get("/admin/jobs/notification/").status_code == 200
    assert client.get(f"/admin/jobs/notification/{sent.pk}/change/").status_code == 200


@override_settings(NOTIFY_TEST_PER_TARGET=1)
def test_the_page_says_why_a_test_past_the_limit_was_not_sent() -> None:
    tenant = make_tenant()
    user = member(tenant)
    sub = subscription_create(
        user=user, tenant=tenant, **{k: v for k, v in FORM.items() if k != "scope"}
    ).subscription
    client = browser(user)
    client.post(f"/notifications/{sub.pk}/test/")
    page = client.post(f"/notifications/{sub.pk}/test/", follow=True).content.decode()
    assert "Not sent: at most 1 test notifications to" in page
    assert Notification.objects.filter(event="test").count() == 1
