"""The tenant page's team section: owners add, re-role and remove members with POST forms (redirect after
POST, a readable message on refusal); members see no forms and are refused (403); everyone sees the quota
and the policy."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tenants.models import Membership, MembershipEvent, Tenant
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def boss(team: Tenant) -> User:
    return member(team, "owner", username="boss")


@pytest.fixture
def owner_client(client: Client, boss: User) -> Client:
    client.force_login(boss)
    return client


def _messages(response: object) -> list[str]:
    return [str(m) for m in response.context["messages"]]  # type: ignore[attr-defined]


def test_owner_sees_the_forms_the_quota_and_the_policy(owner_client: Client, team: Tenant) -> None:
    body = owner_client.get(f"/tenants/{team.slug}/").content.decode()
    assert 'id="member-add"' in body and 'data-action="remove-member"' in body
    assert 'data-testid="policy"' in body and "Images from" in body and "any registry" in body
    assert "Cohort" in body and "Fair-share weight" in body


def test_member_sees_no_forms_and_is_refused(signed_in: Client, team: Tenant, boss: User) -> None:
    make_user("bob")
    body = signed_in.get(f"/tenants/{team.slug}/").content.decode()
    assert 'id="member-add"' not in body and 'data-action="remove-member"' not in body
    assert 'data-testid="policy"' in body
    assert signed_in.post(f"/tenants/{team.slug}/members/", {"username": "bob"}).status_code == 403
    assert signed_in.post(f"/tenants/{team.slug}/members/boss/remove/").status_code == 403
    assert Membership.objects.filter(tenant=team).count() == 2


def test_owner_adds_changes_and_removes_with_redirects(owner_client: Client, team: Tenant) -> None:
    make_user("bob")
    page = f"/tenants/{team.slug}/"
    added = owner_client.post(f"{page}members/", {"username": "bob", "role": "viewer"}, follow=True)
    assert added.redirect_chain == [(f"{page}#members", 302)]
    assert "bob added to Team alpha as viewer." in _messages(added)
    assert Membership.objects.get(tenant=team, user__username="bob").role == "viewer"
    changed = owner_client.post(f"{page}members/bob/role/", {"role": "member"}, follow=True)
    assert "bob is now member of Team alpha." in _messages(changed)
    removed = owner_client.post(f"{page}members/bob/remove/", follow=True)
    assert "bob removed from Team alpha." in _messages(removed)
    assert not Membership.objects.filter(tenant=team, user__username="bob").exists()
    assert MembershipEvent.objects.filter(tenant=team).count() == 3
    assert "bob removed by boss" in removed.content.decode()


def test_refusals_come_back_as_readable_messages(owner_client: Client, team: Tenant) -> None:
    page = f"/tenants/{team.slug}/"
    unknown = owner_client.post(f"{page}members/", {"username": "ghost", "role": "member"}, follow=True)
    assert unknown.redirect_chain == [(f"{page}#members", 302)]
    assert _messages(unknown) == [
        "ghost was not added: no user named ghost; they must sign in or be created first"
    ]
    last = owner_client.post(f"{page}members/boss/role/", {"role": "viewer"}, follow=True)
    assert _messages(last) == [
        "The role of boss was not changed: boss is the last owner of alpha; make another owner first"
    ]
    assert Membership.objects.get(tenant=team, user__username="boss").role == "owner"


def test_other_tenants_member_forms_are_404(owner_client: Client) -> None:
    other = make_tenant()
    member(other, "member", username="carol")
    assert owner_client.post(f"/tenants/{other.slug}/members/carol/remove/").status_code == 404
    assert Membership.objects.filter(tenant=other).count() == 1
