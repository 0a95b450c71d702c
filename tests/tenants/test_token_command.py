"""`manage.py token`: create prints only the secret (and it authenticates the API), list shows tokens
without secrets, revoke stops a token at once; an unknown user or token is a clear CommandError."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from tenants.models import ApiToken
from tenants.tokens import token_create
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_prints_only_a_secret_that_authenticates_the_api() -> None:
    user = member(make_tenant())
    out, err = run("create", "--user", user.username, "--name", "laptop")
    secret = out.strip()
    assert secret.startswith("ty_") and "\n" not in secret and " " not in secret
    assert "shown only this once" in err and secret not in err
    token = ApiToken.objects.get(user=user)
    assert token.name == "laptop" and token.prefix == secret[:10] and secret not in token.digest
    response = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/jobs/")
    assert response.status_code == 200 and response.json()["count"] == 0


def test_create_names_the_token_cli_by_default() -> None:
    user = make_user()
    run("create", "--user", user.username)
    assert ApiToken.objects.get(user=user).name == "cli"


def test_unknown_user_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        run("create", "--user", "ghost")
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        run("list", "--user", "ghost")
    assert not ApiToken.objects.exists()


def test_inactive_user_is_refused() -> None:
    user = make_user(is_active=False)
    with pytest.raises(CommandError, match="inactive"):
        run("create", "--user", user.username)


def test_list_shows_the_users_tokens_without_secrets() -> None:
    user, other = make_user(), make_user()
    mine, secret = token_create(user=user, name="ci")
    token_create(user=other, name="not-mine")
    out, _ = run("list", "--user", user.username)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "SCOPE", "PREFIX"]
    assert len(lines) == 2 and lines[1].split()[:3] == [str(mine.pk), "ci", "submit"]
    assert "active" in lines[1] and secret not in out and "not-mine" not in out


def test_revoke_stops_the_token_at_once() -> None:
    user = member(make_tenant())
    out, _ = run("create", "--user", user.username)
    secret = out.strip()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/jobs/").status_code == 200
    token = ApiToken.objects.get(user=user)
    out, _ = run("revoke", str(token.pk))
    assert f"revoked token {token.pk}" in out
    assert client.get("/api/v1/jobs/").status_code == 401
    listed, _ = run("list", "--user", user.username)
    assert "revoked" in listed.splitlines()[1]
    _, err = run("revoke", str(token.pk))
    assert "already revoked" in err


def test_revoking_an_unknown_token_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no token with id 999999"):
        run("revoke", "999999")


def test_create_takes_a_scope_and_an_expiry_and_defaults_to_submit_for_90_days() -> None:
    user = member(make_tenant())
    _, err = run("create", "--user", user.username, "--name", "default")
    token = ApiToken.objects.get(name="default")
    assert token.scope == "submit" and "scope submit" in err
    assert token.expires_at is not None
    assert abs((token.expires_at - timezone.now()) - timedelta(days=90)) < timedelta(minutes=1)
    run("create", "--user", user.username, "--name", "reader", "--scope", "read", "--expires-in-days", "7")
    reader = ApiToken.objects.get(name="reader")
    assert reader.scope == "read" and reader.expires_at is not None
    assert abs((reader.expires_at - timezone.now()) - timedelta(days=7)) < timedelta(minutes=1)


def test_create_refuses_an_expiry_past_the_platform_maximum(settings: Any) -> None:
    settings.API_TOKEN_MAX_DAYS = 30
    user = make_user()
    with pytest.raises(CommandError, match="--expires-in-days: must be at most 30 days ahead"):
        run("create", "--user", user.username, "--expires-in-days", "31")
    assert not ApiToken.objects.exists()


def test_keep_prints_the_same_live_token_again_and_replaces_one_that_died(tmp_path: Any) -> None:
    """What `make up` runs at every start: one demo token across restarts, kept in a 0600 file."""
    user = member(make_tenant())
    kept = tmp_path / "var" / "demo-token"
    first, _ = run("create", "--user", user.username, "--name", "make up", "--keep", str(kept))
    again, err = run("create", "--user", user.username, "--name", "make up", "--keep", str(kept))
    assert again == first and f"kept in {kept}" in err
    assert kept.read_text().strip() == first.strip() and kept.stat().st_mode & 0o777 == 0o600
    assert ApiToken.objects.filter(user=user).count() == 1
    ApiToken.objects.update(revoked_at=timezone.now())
    fresh, _ = run("create", "--user", user.username, "--name", "make up", "--keep", str(kept))
    assert fresh != first and kept.read_text().strip() == fresh.strip()
    other = member(make_tenant())
    theirs, _ = run("create", "--user", other.username, "--keep", str(kept))
    assert theirs != fresh, "another user's kept token is never handed out"


def test_ensure_database_creates_the_configured_database_once(settings: Any) -> None:
    import uuid

    from django.db import connection

    name = f"trainyard_ensure_{uuid.uuid4().hex[:8]}"
    settings.DATABASES = {"default": {**settings.DATABASES["default"], "NAME": name}}
    out = StringIO()
    try:
        call_command("ensure_database", stdout=out)
        call_command("ensure_database", stdout=out)
        created, found = out.getvalue().splitlines()
        assert created.startswith(f"created database {name} on ")
        assert found.startswith(f"database {name} on ") and found.endswith(" is there")
    finally:
        import psycopg

        test_db = connection.settings_dict  # the test database's own server, outside the test's transaction
        params = {"host": test_db["HOST"], "port": test_db["PORT"], "user": test_db["USER"]}
        params |= {"password": test_db["PASSWORD"], "dbname": "postgres"}
        conninfo = " ".join(f"{k}={v}" for k, v in params.items() if v)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
