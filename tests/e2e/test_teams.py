"""Self-service teams in a real browser: an owner adds a member from the tenant page; a user creates an API
token on the Tokens page, uses it against the API, and revokes it; an invited user follows the link, logs
in and joins."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tenants.models import Membership, MembershipEvent
from tests.e2e.conftest import add_member, create_token, login, screenshot
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.slow


def test_an_owner_adds_a_member_from_the_tenant_page(page: Any) -> None:
    team = make_tenant("vision")
    member(team, "owner", username="olga")
    make_user("bob")
    login(page, "olga")
    page.goto(f"/tenants/{team.slug}/")
    add_member(page, "bob", "viewer")
    assert page.locator(".msg-success").inner_text().strip() == "bob added to Team vision as viewer."
    assert page.url.endswith(f"/tenants/{team.slug}/#members")
    row = page.locator("[data-testid=members] tr[data-member=bob]")
    assert row.locator("select[name=role]").input_value() == "viewer"
    assert "bob added (viewer) by olga" in page.locator("[data-testid=member-events]").inner_text()
    screenshot(page, "team-member-added.png")
    assert Membership.objects.get(tenant=team, user__username="bob").role == "viewer"
    assert MembershipEvent.objects.filter(tenant=team, username="bob", action="added").exists()

    form = page.locator("#member-add")
    form.locator("input[name=username]").fill("nobody")
    form.locator("button[data-action=add-member]").click()
    page.locator(".msg-error", has_text="no user named nobody").wait_for()


def test_an_invited_user_follows_the_link_logs_in_and_joins(page: Any) -> None:
    team = make_tenant("vision")
    member(team, "owner", username="olga")
    make_user("dana", email="dana@example.org")
    login(page, "olga")
    page.goto(f"/tenants/{team.slug}/")
    form = page.locator("#member-invite")
    form.locator("input[name=email]").fill("dana@example.org")
    form.locator("select[name=role]").select_option("viewer")
    form.locator("button[data-action=invite-member]").click()
    link = page.locator("[data-testid=invitation-link]").inner_text().strip()
    assert "/invitations/inv_" in link
    page.context.clear_cookies()

    page.goto(link)
    page.wait_for_url(lambda url: "/login/" in url)
    page.fill("input[name=username]", "dana")
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.locator("button[data-action=accept-invitation]").click()
    page.locator(".msg-success", has_text="You joined Team vision as viewer.").wait_for()
    assert page.url.endswith(f"/tenants/{team.slug}/")
    assert Membership.objects.get(tenant=team, user__username="dana").role == "viewer"
    assert page.locator("#member-add").count() == 0


def _api_get(url: str, secret: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (the test server)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_user_creates_a_token_on_the_tokens_page_and_uses_it(page: Any, server_url: str) -> None:
    team = make_tenant("vision")
    member(team, "member", username="bob")
    login(page, "bob")
    secret = create_token(page, "laptop", scope="read", expires_in_days=30)
    assert secret.startswith("ty_")
    screenshot(page, "tokens-created.png")

    status, body = _api_get(f"{server_url}/api/v1/tenants/", secret)
    assert status == 200 and [t["slug"] for t in body] == ["vision"]

    page.goto("/tokens/")
    assert secret not in page.content()
    row = page.locator("[data-testid=tokens] tr", has_text="laptop")
    assert "active" in row.inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button[data-action=revoke-token]").click()
    page.locator(".msg-success", has_text="revoked").wait_for()
    status, body = _api_get(f"{server_url}/api/v1/tenants/", secret)
    assert status == 401 and "revoked" in body["detail"]
