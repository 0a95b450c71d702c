"""The group map (OIDC_GROUP_MAP, tenants.groupmap) applied to a sign-in's groups, and its checks at
start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from common.ssoconfig import ROLES, Grant, SsoConfigError, grants_for, group_map_parse, providers_parse
from portal.sso import groups_claim
from tenants.groupmap import group_memberships_apply
from tenants.models import Membership, MembershipEvent, Role
from tests.e2e.conftest import ROOT
from tests.factories import make_tenant, make_user, member

MAP = group_map_parse(
    '{"vision-admins": "vision:owner", "vision": "vision:member", "vision-view": "vision:viewer", "nlp": "nlp:member"}'
)


def test_the_roles_a_group_may_grant_are_the_membership_roles() -> None:
    assert tuple(Role.values) == ROLES


def test_the_strongest_role_wins_and_unknown_groups_give_nothing() -> None:
    assert grants_for(["vision-view", "vision", "other"], MAP) == {"vision": "member"}
    assert grants_for(["vision-admins", "vision-view", "nlp"], MAP) == {"vision": "owner", "nlp": "member"}
    assert grants_for([], MAP) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"g": "vision:admin"}', "unknown role 'admin'; choose one of owner, member, viewer"),
        ('{"g": "vision"}', 'must be "tenant:role"'),
        ('{"g": "Vision!:owner"}', "is not a tenant slug"),
        ('["g"]', "must be a JSON object"),
        ("{g", "OIDC_GROUP_MAP is not JSON"),
    ],
)
def test_a_bad_group_map_is_refused_with_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(SsoConfigError, match=message.replace("(", r"\(")):
        group_map_parse(raw)


def test_providers_are_checked() -> None:
    apps = providers_parse(
        '[{"id": "corp", "name": "Corp", "issuer": "https://idp.example.org/", "client_id": "c", "secret": "s"}]'
    )
    assert apps == [
        {
            "provider_id": "corp",
            "name": "Corp",
            "client_id": "c",
            "secret": "s",
            "settings": {
                "server_url": "https://idp.example.org",
                "scope": ["openid", "profile", "email", "groups"],
            },
        }
    ]
    with pytest.raises(SsoConfigError, match=r"OIDC_PROVIDERS\[0\].secret is required"):
        providers_parse('[{"id": "corp", "issuer": "https://idp.example.org", "client_id": "c"}]')
    with pytest.raises(SsoConfigError, match="used twice"):
        providers_parse(
            '[{"id": "a", "issuer": "https://x", "client_id": "c", "secret": "s"},'
            ' {"id": "a", "issuer": "https://y", "client_id": "c", "secret": "s"}]'
        )


def test_the_process_does_not_start_with_an_unknown_role_in_the_map() -> None:
    env = os.environ | {
        "OIDC_GROUP_MAP": '{"ml-vision": "vision:admin"}',
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: OIDC_GROUP_MAP['ml-vision']: unknown role 'admin'" in done.stderr


def test_passwords_off_needs_a_provider() -> None:
    env = os.environ | {
        "LOCAL_LOGIN_ENABLED": "false",
        "OIDC_PROVIDERS": "",
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "LOCAL_LOGIN_ENABLED=false needs a provider" in done.stderr


def test_the_groups_claim_comes_from_the_id_token_else_userinfo() -> None:
    assert groups_claim({"id_token": {"groups": ["a"]}, "userinfo": {"groups": ["b"]}}) == ["a"]
    assert groups_claim({"id_token": {"sub": "x"}, "userinfo": {"groups": ["b", 3]}}) == ["b"]
    assert groups_claim({"id_token": {"sub": "x"}}) == []


@pytest.mark.django_db
def test_managed_tenants_follow_the_groups_and_others_are_left_alone() -> None:
    vision, nlp, other = make_tenant("vision"), make_tenant("nlp"), make_tenant("other")
    member(vision, "owner", username="olga")
    ann = make_user("ann")
    member_of_other = Membership.objects.create(
        tenant=other, user=ann, role=Role.VIEWER
    )  # by hand, unmanaged
    Membership.objects.create(tenant=nlp, user=ann, role=Role.MEMBER)  # by hand, in a managed tenant

    changes = group_memberships_apply(user=ann, groups=["vision-view", "vision"], group_map=MAP)
    assert Membership.objects.get(tenant=vision, user=ann).role == "member"
    assert not Membership.objects.filter(tenant=nlp, user=ann).exists()  # the map manages nlp
    assert Membership.objects.get(pk=member_of_other.pk).role == "viewer"
    assert sorted(changes) == ["ann added in vision as member", "ann removed in nlp"]
    assert MembershipEvent.objects.filter(tenant=nlp, username="ann", action="removed", actor=None).exists()

    assert (
        group_memberships_apply(user=ann, groups=["vision", "vision-view"], group_map=MAP) == []
    )  # no change


@pytest.mark.django_db
def test_a_tenant_the_map_names_but_nobody_created_is_skipped() -> None:
    ann = make_user("ann")
    assert group_memberships_apply(user=ann, groups=["nlp"], group_map={"nlp": Grant("nlp", "member")}) == []
    assert not Membership.objects.filter(user=ann).exists()


@pytest.mark.django_db
def test_the_last_owner_is_not_removed_by_a_group_change() -> None:
    vision = make_tenant("vision")
    ann = member(vision, "owner", username="ann")
    changes = group_memberships_apply(user=ann, groups=[], group_map=MAP)
    assert changes == ["ann stays owner of vision: the last owner (groups give none)"]
    assert Membership.objects.get(tenant=vision, user=ann).role == "owner"
    assert not MembershipEvent.objects.filter(tenant=vision, username="ann").exists()
