"""Self-service teams in a real browser: an owner adds a member from the tenant page, and the new member
then sees the team."""

from __future__ import annotations

from typing import Any

import pytest

from tenants.models import Membership, MembershipEvent
from tests.e2e.conftest import login, screenshot
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.slow


def test_an_owner_adds_a_member_from_the_tenant_page(page: Any) -> None:
    team = make_tenant("vision")
    member(team, "owner", username="olga")
    make_user("bob")
    login(page, "olga")
    page.goto(f"/tenants/{team.slug}/")
    form = page.locator("#member-add")
    form.locator("input[name=username]").fill("bob")
    form.locator("select[name=role]").select_option("viewer")
    form.locator("button[data-action=add-member]").click()
    page.locator(".msg-success", has_text="bob added to Team vision as viewer.").wait_for()
    assert page.url.endswith(f"/tenants/{team.slug}/#members")
    row = page.locator("[data-testid=members] tr[data-member=bob]")
    assert row.locator("select[name=role]").input_value() == "viewer"
    assert "bob added (viewer) by olga" in page.locator("[data-testid=member-events]").inner_text()
    screenshot(page, "team-member-added.png")
    assert Membership.objects.get(tenant=team, user__username="bob").role == "viewer"
    assert MembershipEvent.objects.filter(tenant=team, username="bob", action="added").exists()

    form.locator("input[name=username]").fill("nobody")
    form.locator("button[data-action=add-member]").click()
    page.locator(".msg-error", has_text="no user named nobody").wait_for()


def test_a_new_member_sees_the_team_after_being_added(page: Any) -> None:
    team = make_tenant("vision")
    owner = member(team, "owner", username="olga")
    make_user("bob")
    login(page, "bob")
    assert page.locator("nav >> text=Team").count() == 0
    from tenants.members import member_add

    member_add(tenant=team, actor=owner, username="bob", role="member")
    page.goto(f"/tenants/{team.slug}/")
    page.locator("#members-h").wait_for()
    assert page.locator("#member-add").count() == 0
