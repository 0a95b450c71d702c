"""The Tokens page: a user lists, creates and revokes only their own tokens; the secret is shown once and
works against the API; bad input comes back with its field; another user's token is 404."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from tenants.models import ApiToken
from tenants.tokens import token_create
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def test_the_navigation_links_the_tokens_page(signed_in: Client) -> None:
    body = signed_in.get("/").content.decode()
    assert 'href="/tokens/"' in body
    page = signed_in.get("/tokens/")
    assert page.status_code == 200 and "No tokens yet." in page.content.decode()


def test_create_shows_the_secret_once_and_it_authenticates(signed_in: Client, alice: User) -> None:
    response = signed_in.post("/tokens/new/", {"name": "laptop", "scope": "read", "expires_in_days": "7"})
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    match = re.search(r'data-testid="token-secret">(ty_[^<]+)<', response.content.decode())
    assert match is not None
    token = ApiToken.objects.get(user=alice)
    assert (token.name, token.scope) == ("laptop", "read")
    assert token.expires_at is not None
    assert abs(token.expires_at - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {match.group(1)}")
    assert api.get("/api/v1/tenants/").status_code == 200
    listed = signed_in.get("/tokens/").content.decode()
    assert "laptop" in listed and token.prefix in listed and match.group(1) not in listed


def test_blank_expiry_takes_the_default(signed_in: Client, alice: User) -> None:
    signed_in.post("/tokens/new/", {"name": "ci", "scope": "submit", "expires_in_days": ""})
    token = ApiToken.objects.get(user=alice)
    assert token.expires_at is not None
    assert abs(token.expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("form", "field", "words"),
    [
        ({"name": "", "scope": "read"}, "name", "give the token a name"),
        ({"name": "x", "scope": "root"}, "scope", "choose one of read, submit, admin"),
        ({"name": "x", "scope": "read", "expires_in_days": "soon"}, "expires_in_days", "whole number"),
        ({"name": "x", "scope": "read", "expires_in_days": "0"}, "expires_in_days", "at least 1 day"),
        ({"name": "x", "scope": "read", "expires_in_days": "9999"}, "expires_in_days", "at most 365 days"),
    ],
)
def test_bad_input_comes_back_with_its_field(
    signed_in: Client, form: dict[str, str], field: str, words: str
) -> None:
    response = signed_in.post("/tokens/new/", form)
    assert response.status_code == 400
    body = response.content.decode()
    assert f'<code class="field">{field}</code>' in body and words in body
    assert not ApiToken.objects.exists()


def test_revoke_stops_the_token_and_another_users_token_is_404(signed_in: Client, alice: User) -> None:
    mine, secret = token_create(user=alice, name="old")
    theirs, _ = token_create(user=make_user("bob"), name="bobs")
    response = signed_in.post(f"/tokens/{mine.pk}/revoke/", follow=True)
    assert response.redirect_chain == [("/tokens/", 302)]
    assert "Token old" in response.content.decode() and "revoked" in response.content.decode()
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/tenants/").status_code == 401
    assert signed_in.post(f"/tokens/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert "bobs" not in signed_in.get("/tokens/").content.decode()


def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    assert client.get("/tokens/")["Location"].startswith("/login/")
    assert client.post("/tokens/new/", {"name": "x"})["Location"].startswith("/login/")
