"""A token cannot outlive the token that created it nor have a wider scope, and no token is born expired
(API and service)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tenants.models import ApiToken
from tenants.tokens import TokenRefused, token_create
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def post_token(client: Client, **body: object) -> tuple[int, dict]:
    response = client.post("/api/v1/tokens/", {"name": "child", **body}, content_type="application/json")
    return response.status_code, response.json()


def test_a_short_lived_token_mints_children_that_expire_with_it() -> None:
    user = member(make_tenant())
    parent_expiry = timezone.now() + timedelta(hours=1)
    _, secret = token_create(user=user, name="short", scope="admin", expires_at=parent_expiry)

    code, body = post_token(bearer(secret))
    assert code == 201, body
    assert ApiToken.objects.get(pk=body["id"]).expires_at == parent_expiry, "no expiry asked: the parent's"

    sooner = parent_expiry - timedelta(minutes=30)
    code, body = post_token(bearer(secret), expires_at=sooner.isoformat())
    assert code == 201 and ApiToken.objects.get(pk=body["id"]).expires_at == sooner


def test_a_child_token_may_not_expire_after_its_parent_and_nothing_is_stored() -> None:
    user = member(make_tenant())
    _, secret = token_create(
        user=user, name="short", scope="admin", expires_at=timezone.now() + timedelta(hours=1)
    )
    before = ApiToken.objects.count()

    code, body = post_token(bearer(secret), expires_at=(timezone.now() + timedelta(days=365)).isoformat())
    assert code == 400
    assert "must not be later than the expiry of the token" in body["errors"]["expires_at"][0]
    assert ApiToken.objects.count() == before


def test_an_expiry_in_the_past_is_refused_on_every_path() -> None:
    user = member(make_tenant())
    client = Client()
    client.force_login(user)
    code, body = post_token(client, expires_at=(timezone.now() - timedelta(minutes=1)).isoformat())
    assert code == 400 and body["errors"] == {"expires_at": ["must be in the future"]}
    with pytest.raises(TokenRefused, match="must be in the future"):
        token_create(user=user, name="late", expires_at=timezone.now())
    assert not ApiToken.objects.filter(user=user).exists()


def test_a_token_without_expiry_or_a_browser_session_mints_as_asked(settings: Any) -> None:
    settings.API_TOKEN_DEFAULT_DAYS = 0  # an installation that lets tokens live for ever
    user = member(make_tenant())
    _, secret = token_create(user=user, name="forever", scope="admin")
    code, body = post_token(bearer(secret))
    assert code == 201 and body["expires_at"] is None
    client = Client()
    client.force_login(user)
    later = timezone.now() + timedelta(days=30)
    code, body = post_token(client, expires_at=later.isoformat())
    assert code == 201 and ApiToken.objects.get(pk=body["id"]).expires_at == later


def test_a_token_may_not_mint_a_wider_scope_than_its_own() -> None:
    user = member(make_tenant())
    parent, _ = token_create(user=user, name="ci", scope="submit")
    with pytest.raises(
        TokenRefused, match=r"must not be wider than the scope of the token this request used \(submit\)"
    ):
        token_create(user=user, name="wider", scope="admin", parent=parent)
    child, _ = token_create(user=user, name="narrower", scope="read", parent=parent)
    assert child.scope == "read"
