"""`trainyard registries` against a live server: an owner adds (password at a hidden prompt or from stdin,
never an argument), lists, rotates and deletes registry credentials and reads their audit, and no output
ever carries a password; a member is refused and another tenant's slug is not found, each with the server's
message and exit 1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from common import sealing
from tenants.models import RegistryCredential, RegistryCredentialEvent
from tenants.registries import registry_auth, registry_credential_create
from tenants.services import membership_set
from tests.cli.conftest import Account
from tests.factories import make_tenant, member
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "glpat-Cli-Registry-0001"
ROTATED = "glpat-Cli-Registry-0002"


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.app, list(args), input=stdin, env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_an_owner_manages_registry_credentials_and_never_sees_a_password(account: Account) -> None:
    slug, me = account.tenant.slug, account.user.username
    membership_set(tenant=account.tenant, user=account.user, role="owner")
    add = ("registries", "add", slug, "team", "--host", "Registry.Example.com", "--username", "robot$team")
    code, out, err = run(*add, stdin=f"{PASSWORD}\n")  # typed at the hidden prompt
    assert (code, err) == (0, ""), err
    assert out.endswith(f"added registry credential team for registry.example.com to {slug}\n")
    assert PASSWORD not in out  # the prompt does not echo it
    auth = registry_auth(tenant=account.tenant, host="registry.example.com")
    assert auth is not None and (auth.username, auth.password) == ("robot$team", PASSWORD)

    code, out, _ = run("registries", "list", slug)
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["NAME", "HOST", "USERNAME", "CREATED", "ROTATED"]
    assert row.split()[:3] == ["team", "registry.example.com", "robot$team"] and f"by {me}" in row
    code, out, _ = run("registries", "list", slug, "--json")
    assert code == 0 and PASSWORD not in out
    (listed,) = json.loads(out)
    assert "password" not in listed and (listed["name"], listed["created_by"]) == ("team", me)

    code, out, err = run(
        "registries", "rotate", slug, "team", "--username", "robot2", "--password-stdin", stdin=ROTATED
    )
    assert (code, out, err) == (0, f"rotated registry credential team of {slug}\n", "")
    stored = RegistryCredential.objects.get()
    assert sealing.unseal(stored.sealed) == {"password": ROTATED} and stored.rotated_by == account.user
    code, out, _ = run("registries", "list", slug)
    assert code == 0 and "robot2" in out and ROTATED not in out and out.count(f"by {me}") == 2

    assert run("registries", "delete", slug, "team")[:2] == (
        0,
        f"deleted registry credential team of {slug}\n",
    )
    assert not RegistryCredential.objects.exists()
    code, out, _ = run("registries", "events", slug)
    assert code == 0
    assert [line.split()[2] for line in out.splitlines()[1:]] == ["deleted", "rotated", "created"]
    assert all(line.split()[-1] == me for line in out.splitlines()[1:])
    code, out, _ = run("registries", "events", slug, "--json")
    assert code == 0 and PASSWORD not in out and ROTATED not in out
    assert [e["action"] for e in json.loads(out)] == ["deleted", "rotated", "created"]
    code, _, err = run("registries", "delete", slug, "team")
    assert code == 1 and "no such registry credential [404 Not Found]" in err


def test_the_password_comes_from_stdin_without_its_line_break(account: Account) -> None:
    membership_set(tenant=account.tenant, user=account.user, role="owner")
    add = ("registries", "add", account.tenant.slug, "hub", "--host", "docker.io", "-u", "me")
    assert run(*add, "--password-stdin", stdin=f"{PASSWORD}\r\n")[0] == 0
    auth = registry_auth(tenant=account.tenant, host="docker.io")
    assert auth is not None and auth.password == PASSWORD


def test_bad_fields_are_reported_field_by_field(account: Account) -> None:
    membership_set(tenant=account.tenant, user=account.user, role="owner")
    code, out, err = run(
        "registries", "add", account.tenant.slug, "x!", "--host", "https://r.example/v2", "-u", "a:b",
        "--password-stdin", stdin="",
    )  # fmt: skip
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "error: the server refused the request [400 Bad Request]"
    assert {line.split(":")[0].strip() for line in lines[1:]} == {"name", "host", "username", "password"}
    assert not RegistryCredential.objects.exists() and not RegistryCredentialEvent.objects.exists()


def test_a_member_is_refused(account: Account) -> None:
    slug = account.tenant.slug
    owner = member(account.tenant, "owner")
    registry_credential_create(
        tenant=account.tenant,
        user=owner,
        name="team",
        host="registry.example.com",
        values={"username": "robot", "password": PASSWORD},
    )
    code, out, _ = run("registries", "list", slug)  # members may look
    assert code == 0 and "registry.example.com" in out and PASSWORD not in out
    add = ("registries", "add", slug, "mine", "--host", "quay.io", "-u", "me", "--password-stdin")
    for args in (
        add,
        ("registries", "rotate", slug, "team", "-u", "me"),
        ("registries", "delete", slug, "team"),
    ):
        code, _, err = run(*args, stdin=PASSWORD)
        assert code == 1 and err.startswith(
            f"error: only owners of tenant {slug} manage its registry credentials [403 Forbidden]"
        ), (args, err)
    assert list(RegistryCredential.objects.values_list("name", "username")) == [("team", "robot")]
    assert RegistryCredentialEvent.objects.count() == 1


def test_another_tenants_slug_is_not_found(account: Account) -> None:
    membership_set(tenant=account.tenant, user=account.user, role="owner")
    other = make_tenant()
    registry_credential_create(
        tenant=other,
        user=member(other, "owner"),
        name="theirs",
        host="registry.example.com",
        values={"username": "robot", "password": PASSWORD},
    )
    for args in (
        ("registries", "list", other.slug),
        ("registries", "events", other.slug),
        ("registries", "delete", other.slug, "theirs"),
        ("registries", "rotate", other.slug, "theirs", "-u", "me", "--password-stdin"),
    ):
        code, out, err = run(*args, stdin=PASSWORD)
        assert (code, out) == (1, "") and err == "error: no such tenant [404 Not Found]\n", (args, err)
    assert RegistryCredential.objects.get().username == "robot"
