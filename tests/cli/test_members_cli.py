"""`trainyard members` against a live server: an owner lists, adds, re-roles and removes members; the last
owner stays and a member is refused, each with the server's message and exit 1."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tenants.models import Membership, MembershipEvent
from tenants.services import membership_set
from tests.cli.conftest import Account
from tests.factories import make_user
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_an_owner_runs_the_team_from_the_cli(account: Account) -> None:
    slug, me = account.tenant.slug, account.user.username
    membership_set(tenant=account.tenant, user=account.user, role="owner")
    make_user("bob", email="bob@example.org")
    assert run("members", "add", slug, "bob", "--role", "viewer") == (
        0,
        f"added bob to {slug} as viewer\n",
        "",
    )
    code, out, _ = run("members", "list", slug)
    assert code == 0 and "bob" in out and "viewer" in out and "bob@example.org" in out
    assert run("members", "role", slug, "bob", "member")[:2] == (0, f"bob is now member of {slug}\n")
    code, _, err = run("members", "role", slug, me, "viewer")
    assert code == 1 and "last owner" in err
    code, _, err = run("members", "add", slug, "ghost")
    assert code == 1 and "no user named ghost" in err
    assert run("members", "remove", slug, "bob")[:2] == (0, f"removed bob from {slug}\n")
    assert list(Membership.objects.values_list("user__username", flat=True)) == [me]
    assert MembershipEvent.objects.filter(tenant=account.tenant).count() == 3


def test_a_member_is_refused(account: Account) -> None:
    make_user("bob")
    code, _, err = run("members", "add", account.tenant.slug, "bob")
    assert code == 1 and "only owners" in err
    assert not Membership.objects.filter(user__username="bob").exists()
