"""`manage.py tenant`: create makes a tenant with its first owner (who then sees it), member add adds an
existing user with a role; both audited; bad input is a CommandError naming the argument, and nothing is
made."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command

from tenants.models import Membership, MembershipEvent, Quota, Tenant
from tenants.scoping import Perm, has_perm
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command("tenant", *args, stdout=out)
    return out.getvalue()


def test_create_makes_the_tenant_with_its_owner() -> None:
    alice = make_user("alice")
    assert run("create", "vision", "--owner", "alice", "--name", "Vision team").strip() == (
        "created tenant vision (Vision team) with owner alice"
    )
    tenant = Tenant.objects.get(slug="vision")
    assert tenant.name == "Vision team" and Quota.objects.filter(tenant=tenant).exists()
    assert has_perm(alice, tenant, Perm.MANAGE_TENANT)
    event = MembershipEvent.objects.get(tenant=tenant)
    assert (event.username, event.action, event.role, event.actor) == ("alice", "added", "owner", None)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["create", "Bad_Slug", "--owner", "alice"], "SLUG: use 1 to 40 lower-case letters"),
        (["create", "taken", "--owner", "alice"], "SLUG: a tenant taken already exists"),
        (["create", "fresh", "--owner", "ghost"], "--owner: no active user named ghost"),
    ],
)
def test_create_refuses_bad_input_and_makes_nothing(args: list[str], words: str) -> None:
    make_user("alice")
    make_tenant("taken")
    with pytest.raises(CommandError, match=words):
        run(*args)
    assert list(Tenant.objects.values_list("slug", flat=True)) == ["taken"]
    assert not Membership.objects.exists()


def test_member_add_gives_the_role() -> None:
    tenant = make_tenant("vision")
    bob = make_user("bob")
    assert (
        run("member", "add", "vision", "bob", "--role", "viewer").strip() == "added bob to vision as viewer"
    )
    assert has_perm(bob, tenant, Perm.VIEW) and not has_perm(bob, tenant, Perm.SUBMIT)
    assert MembershipEvent.objects.get(tenant=tenant).action == "added"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["member", "add", "nope", "bob"], "SLUG: no tenant nope"),
        (["member", "add", "vision", "ghost"], "USER: no user named ghost"),
        (["member", "add", "vision", "carol"], "USER: carol is already a member of vision"),
        (["member", "add", "vision", "bob", "--role", "king"], "invalid choice: 'king'"),
    ],
)
def test_member_add_refuses_bad_input(args: list[str], words: str) -> None:
    tenant = make_tenant("vision")
    make_user("bob")
    member(tenant, "viewer", username="carol")
    with pytest.raises(CommandError, match=words):
        run(*args)
    assert list(Membership.objects.values_list("user__username", "role")) == [("carol", "viewer")]


def _shell(*args: str) -> subprocess.CompletedProcess[str]:
    """`manage.py tenant ...` as an operator runs it, against this test's database."""
    from django.db import connection

    db = connection.settings_dict
    url = f"postgres://{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}@{quote(db['HOST'] or '')}"
    url += f":{db['PORT'] or ''}/{db['NAME']}"
    env = os.environ | {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings.local"}
    return subprocess.run(
        [sys.executable, "manage.py", "tenant", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.django_db(transaction=True)
def test_from_the_shell_success_exits_zero_and_bad_input_non_zero() -> None:
    make_user("alice")
    done = _shell("create", "vision", "--owner", "alice")
    assert done.returncode == 0, done.stderr
    assert Membership.objects.get(tenant__slug="vision").user.username == "alice"
    again = _shell("create", "vision", "--owner", "alice")
    assert again.returncode == 1 and "SLUG: a tenant vision already exists" in again.stderr
    bad_role = _shell("member", "add", "vision", "alice", "--role", "king")
    assert bad_role.returncode == 2 and "invalid choice: 'king'" in bad_role.stderr
