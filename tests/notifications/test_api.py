"""The notifications API: create (the secret once), list, change, test, delete and the delivery log;
field-level 400s with nothing stored, owners only for tenant subscriptions (403), and 404 for another
user's or another tenant's subscription."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from jobs.notifications.delivery import deliver
from jobs.notifications.models import Notification, Subscription
from jobs.notifications.services import subscription_secret
from tests.factories import make_tenant, member
from tests.notifications.receiver import receiver

pytestmark = pytest.mark.django_db

HOOK = {"name": "ci", "channel": "webhook", "url": "http://127.0.0.1:9/hook", "events": ["succeeded"]}


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post(user: Any, body: dict[str, Any]) -> Any:
    return api(user).post("/api/v1/notifications/", body, content_type="application/json")


def test_create_shows_the_secret_once_and_never_again() -> None:
    tenant = make_tenant("vision")
    user = member(tenant)
    response = post(user, {"tenant": "vision", **HOOK})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["secret"].startswith("whsec_") and body["scope"] == "user" and body["owner"] == user.username
    assert body["tenant"] == "vision" and body["target"] == HOOK["url"] and body["enabled"] is True
    sub = Subscription.objects.get()
    assert subscription_secret(sub) == body["secret"] and body["secret"] not in sub.secret_sealed
    again = api(user).get(f"/api/v1/notifications/{sub.pk}/").json()
    listed = api(user).get("/api/v1/notifications/").json()
    assert "secret" not in again and [row["id"] for row in listed] == [sub.pk] and "secret" not in listed[0]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"url": "ftp://example.com/x"}, "url", "http:// or https://"),
        ({"url": ""}, "url", "the webhook's URL"),
        ({"channel": "pager"}, "channel", "is not a valid choice"),
        ({"events": []}, "events", "may not be empty"),
        ({"events": ["exploded"]}, "events.0", "is not a valid choice"),
        ({"events": ["queued_too_long"]}, "queued_minutes", "after how many minutes"),
        ({"events": ["queued_too_long"], "queued_minutes": 0}, "queued_minutes", "from 1 to"),
        ({"name": ""}, "name", "may not be blank"),
        ({"channel": "email", "email": "not-an-address"}, "email", "valid e-mail address"),
        ({"scope": "everyone"}, "scope", "is not a valid choice"),
    ],
)
def test_bad_input_is_a_field_error_and_stores_nothing(body: dict[str, Any], field: str, words: str) -> None:
    tenant = make_tenant()
    response = post(member(tenant), {"tenant": tenant.slug, **HOOK, **body})
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert words in " ".join(errors[field]), errors
    assert not Subscription.objects.exists()


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
def test_a_private_webhook_target_is_a_field_error() -> None:
    tenant = make_tenant()
    response = post(member(tenant), {"tenant": tenant.slug, **HOOK, "url": "http://169.254.169.254/latest/"})
    assert response.status_code == 400
    assert "not allowed as webhook targets" in response.json()["errors"]["url"][0]
    assert not Subscription.objects.exists()


def test_only_owners_create_tenant_subscriptions() -> None:
    tenant = make_tenant()
    response = post(member(tenant), {"tenant": tenant.slug, "scope": "tenant", **HOOK})
    assert response.status_code == 403 and "owners" in response.json()["errors"]["scope"][0]
    response = post(member(tenant, "owner"), {"tenant": tenant.slug, "scope": "tenant", **HOOK})
    assert (
        response.status_code == 201
        and response.json()["scope"] == "tenant"
        and response.json()["owner"] is None
    )


def test_another_tenants_users_get_404_everywhere() -> None:
    tenant, other = make_tenant(), make_tenant()
    owner = member(tenant, "owner")
    mine = post(owner, {"tenant": tenant.slug, **HOOK}).json()["id"]
    team = post(owner, {"tenant": tenant.slug, "scope": "tenant", **HOOK}).json()["id"]
    stranger = api(member(other, "owner"))
    for pk in (mine, team):
        for method, path in (
            ("get", ""), ("patch", ""), ("delete", ""), ("post", "test/"), ("get", "deliveries/"),
        ):  # fmt: skip
            response = getattr(stranger, method)(
                f"/api/v1/notifications/{pk}/{path}", {"enabled": False}, content_type="application/json"
            )
            assert response.status_code == 404, (method, path, response.content)
    assert stranger.get("/api/v1/notifications/").json() == []
    response = stranger.post(
        "/api/v1/notifications/", {"tenant": tenant.slug, **HOOK}, content_type="application/json"
    )
    assert response.status_code == 404 and Subscription.objects.count() == 2


def test_a_member_sees_neither_a_colleagues_nor_the_tenants_subscriptions() -> None:
    tenant = make_tenant()
    owner, colleague = member(tenant, "owner"), member(tenant)
    mine = post(owner, {"tenant": tenant.slug, **HOOK}).json()["id"]
    team = post(owner, {"tenant": tenant.slug, "scope": "tenant", **HOOK}).json()["id"]
    client = api(colleague)
    assert client.get("/api/v1/notifications/").json() == []
    assert client.get(f"/api/v1/notifications/{mine}/").status_code == 404
    assert client.get(f"/api/v1/notifications/{team}/").status_code == 404
    assert {row["id"] for row in api(owner).get("/api/v1/notifications/").json()} == {mine, team}


def test_patch_changes_the_allowed_fields_only() -> None:
    tenant = make_tenant()
    user = member(tenant)
    pk = post(user, {"tenant": tenant.slug, **HOOK}).json()["id"]
    client = api(user)
    url = f"/api/v1/notifications/{pk}/"
    response = client.patch(
        url, {"enabled": False, "events": ["failed", "halted"]}, content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["enabled"] is False
    assert response.json()["events"] == ["failed", "halted"]
    response = client.patch(url, {"url": "http://127.0.0.1:10/"}, content_type="application/json")
    assert response.status_code == 400 and "url" in response.json()["errors"]
    response = client.patch(url, {"enabled": "maybe"}, content_type="application/json")
    assert response.status_code == 400 and "enabled" in response.json()["errors"]
    assert Subscription.objects.get().url == HOOK["url"]
    assert client.delete(url).status_code == 204 and not Subscription.objects.exists()


def test_send_a_test_and_read_the_delivery_log() -> None:
    tenant = make_tenant()
    user = member(tenant)
    with receiver(500) as hook:
        pk = post(user, {"tenant": tenant.slug, **HOOK, "url": hook.url}).json()["id"]
        response = api(user).post(f"/api/v1/notifications/{pk}/test/")
        assert response.status_code == 202 and response.json()["event"] == "test"
        deliver(Notification.objects.get().pk)
        hook.wait_for(1)
    (entry,) = api(user).get(f"/api/v1/notifications/{pk}/deliveries/").json()
    assert entry["event"] == "test" and entry["job"] is None and entry["state"] == "pending"
    (attempt,) = entry["attempts"]
    assert attempt["status_code"] == 500 and attempt["error"] == "HTTP 500" and attempt["next_retry_at"]


def test_slack_urls_are_shown_by_host_only() -> None:
    tenant = make_tenant()
    body = {**HOOK, "channel": "slack", "url": "http://127.0.0.1:9/services/T000/B000/XXXXSECRET"}
    created = post(member(tenant), {"tenant": tenant.slug, **body}).json()
    assert created["target"] == "http://127.0.0.1:9/…" and created["secret"] is None


@override_settings(NOTIFY_TEST_PER_TARGET=2, NOTIFY_TEST_PER_USER=3, NOTIFY_TEST_WINDOW_SECONDS=600)
def test_test_sends_are_limited_per_target_with_a_clear_429() -> None:
    tenant = make_tenant()
    user, colleague = member(tenant), member(tenant)
    mine = post(user, {"tenant": tenant.slug, **HOOK}).json()["id"]
    theirs = post(colleague, {"tenant": tenant.slug, **HOOK, "name": "same url"}).json()["id"]
    assert [api(user).post(f"/api/v1/notifications/{mine}/test/").status_code for _ in range(2)] == [202, 202]
    refused = api(colleague).post(f"/api/v1/notifications/{theirs}/test/")
    assert refused.status_code == 429, "another subscription to the same URL shares the target's limit"
    detail = refused.json()["detail"]
    assert detail.startswith(f"at most 2 test notifications to {HOOK['url']} every 10 minutes; try again in")
    assert Notification.objects.filter(event="test").count() == 2


@override_settings(NOTIFY_TEST_PER_TARGET=5, NOTIFY_TEST_PER_USER=3, NOTIFY_TEST_WINDOW_SECONDS=600)
def test_test_sends_are_limited_per_user_across_targets() -> None:
    tenant = make_tenant()
    user, colleague = member(tenant), member(tenant)
    ids = [
        post(user, {"tenant": tenant.slug, **HOOK, "url": f"http://127.0.0.1:9/hook{n}"}).json()["id"]
        for n in range(4)
    ]
    codes = [api(user).post(f"/api/v1/notifications/{pk}/test/").status_code for pk in ids]
    assert codes == [202, 202, 202, 429]
    assert (
        "test notifications from you"
        in api(user).post(f"/api/v1/notifications/{ids[0]}/test/").json()["detail"]
    )
    other = post(colleague, {"tenant": tenant.slug, **HOOK, "url": "http://127.0.0.1:9/other"}).json()["id"]
    assert api(colleague).post(f"/api/v1/notifications/{other}/test/").status_code == 202, "others unaffected"
