"""Owners run their team through the API: add an existing user with a role, change a role, remove a member;
members are refused (403), other tenants are 404, the last owner stays, bad input is a field error, and
every change is audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tenants.models import Membership, MembershipEvent, Tenant
from tenants.scoping import Perm, has_perm
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def members_url(tenant: Tenant, username: str = "") -> str:
    return f"/api/v1/tenants/{tenant.slug}/members/" + (f"{username}/" if username else "")


def test_owner_adds_an_existing_user_who_then_sees_the_tenant() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    bob = make_user("bob", email="bob@example.org")
    response = logged_in(owner).post(
        members_url(tenant), {"username": "bob", "role": "viewer"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert response.json() == {"username": "bob", "role": "viewer", "email": "bob@example.org"}
    assert has_perm(bob, tenant, Perm.VIEW) and not has_perm(bob, tenant, Perm.SUBMIT)
    event = MembershipEvent.objects.get(tenant=tenant)
    assert (event.username, event.action, event.role, event.actor) == ("bob", "added", "viewer", owner)


def test_owner_changes_a_role_and_permissions_follow() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    bob = member(tenant, "viewer", username="bob")
    response = logged_in(owner).patch(
        members_url(tenant, "bob"), {"role": "member"}, content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["role"] == "member"
    assert has_perm(bob, tenant, Perm.SUBMIT)
    event = MembershipEvent.objects.get(tenant=tenant)
    assert (event.action, event.previous_role, event.role) == ("role_changed", "viewer", "member")


def test_owner_removes_a_member_who_then_gets_404() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    bob = member(tenant, "member", username="bob")
    assert logged_in(owner).delete(members_url(tenant, "bob")).status_code == 204
    assert not Membership.objects.filter(user=bob).exists()
    assert logged_in(bob).get(f"/api/v1/tenants/{tenant.slug}/").status_code == 404
    assert MembershipEvent.objects.get(tenant=tenant).action == "removed"


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_non_owners_get_403_and_nothing_changes(role: str) -> None:
    tenant = make_tenant()
    member(tenant, "owner", username="boss")
    user = member(tenant, role)
    make_user("bob")
    client = logged_in(user)
    add = client.post(members_url(tenant), {"username": "bob"}, content_type="application/json")
    patch = client.patch(members_url(tenant, "boss"), {"role": "viewer"}, content_type="application/json")
    delete = client.delete(members_url(tenant, "boss"))
    assert [add.status_code, patch.status_code, delete.status_code] == [403, 403, 403]
    assert "only owners" in add.json()["detail"]
    assert Membership.objects.filter(tenant=tenant).count() == 2 and not MembershipEvent.objects.exists()
    assert client.get(f"/api/v1/tenants/{tenant.slug}/member-events/").status_code == 403


def test_owner_of_another_tenant_gets_404() -> None:
    mine, other = make_tenant(), make_tenant()
    owner = member(mine, "owner")
    member(other, "member", username="bob")
    client = logged_in(owner)
    assert (
        client.post(members_url(other), {"username": "bob"}, content_type="application/json").status_code
        == 404
    )
    assert (
        client.patch(
            members_url(other, "bob"), {"role": "owner"}, content_type="application/json"
        ).status_code
        == 404
    )
    assert client.delete(members_url(other, "bob")).status_code == 404


def test_platform_admin_manages_members_without_being_one() -> None:
    tenant = make_tenant()
    admin = make_user("root", is_superuser=True, is_staff=True)
    make_user("bob")
    response = logged_in(admin).post(
        members_url(tenant), {"username": "bob", "role": "owner"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert MembershipEvent.objects.get(tenant=tenant).actor == admin


def test_last_owner_can_be_neither_demoted_nor_removed() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner", username="boss")
    client = logged_in(owner)
    demote = client.patch(members_url(tenant, "boss"), {"role": "member"}, content_type="application/json")
    assert demote.status_code == 400 and "last owner" in demote.json()["errors"]["role"][0]
    remove = client.delete(members_url(tenant, "boss"))
    assert remove.status_code == 400 and "last owner" in remove.json()["errors"]["username"][0]
    member(tenant, "owner", username="second")
    assert (
        client.patch(
            members_url(tenant, "boss"), {"role": "member"}, content_type="application/json"
        ).status_code
        == 200
    )
    assert Membership.objects.get(user=owner).role == "member"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"username": "nobody", "role": "member"}, "username", "no user named nobody"),
        ({"username": "bob", "role": "king"}, "role", "choose one of owner, member, viewer"),
        ({"username": "boss"}, "username", "already a member"),
        ({"role": "member"}, "username", "required"),
        ({"username": 42, "role": "member"}, "username", "must be a username (text), got int"),
        ({"username": "bob", "colour": "red"}, "colour", "unknown field"),
    ],
)
def test_bad_input_is_a_field_error(body: dict[str, str], field: str, words: str) -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner", username="boss")
    make_user("bob")
    response = logged_in(owner).post(members_url(tenant), body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert words in response.json()["errors"][field][0]
    assert not MembershipEvent.objects.exists()


def test_bad_role_on_patch_and_unknown_member_are_field_errors() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner", username="boss")
    client = logged_in(owner)
    bad = client.patch(members_url(tenant, "boss"), {"role": "king"}, content_type="application/json")
    assert bad.status_code == 400 and "role" in bad.json()["errors"]
    missing = client.patch(members_url(tenant, "ghost"), {"role": "member"}, content_type="application/json")
    assert missing.status_code == 404 and "not a member" in missing.json()["errors"]["username"][0]


def test_owner_reads_the_membership_audit() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner", username="boss")
    make_user("bob")
    client = logged_in(owner)
    client.post(members_url(tenant), {"username": "bob", "role": "member"}, content_type="application/json")
    client.patch(members_url(tenant, "bob"), {"role": "owner"}, content_type="application/json")
    client.delete(members_url(tenant, "bob"))
    rows = client.get(f"/api/v1/tenants/{tenant.slug}/member-events/").json()
    assert [(r["action"], r["username"], r["actor"]) for r in rows] == [
        ("removed", "bob", "boss"),
        ("role_changed", "bob", "boss"),
        ("added", "bob", "boss"),
    ]


def test_a_read_scoped_token_cannot_change_members() -> None:
    from tenants.tokens import token_create

    tenant = make_tenant()
    owner = member(tenant, "owner")
    make_user("bob")
    _, secret = token_create(user=owner, name="t", scope="read")
    response = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").post(
        members_url(tenant), {"username": "bob"}, content_type="application/json"
    )
    assert response.status_code == 403 and not MembershipEvent.objects.exists()
