"""Several providers from OIDC_PROVIDERS: a button each on the login page, and each button starts the code
flow with PKCE (S256) at its own provider (here the test provider under two client registrations)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client

from common.ssoconfig import providers_parse
from tests.sso.provider import CLIENT_ID, CLIENT_SECRET, SHORT_CLIENT_ID, Provider, provider_sign_in

pytestmark = pytest.mark.django_db


def test_each_provider_has_a_button_that_starts_its_code_flow_with_pkce(
    settings: Any, provider: Provider
) -> None:
    apps = providers_parse(
        json.dumps(
            [
                {
                    "id": "corp",
                    "name": "Corp",
                    "issuer": provider.issuer,
                    "client_id": CLIENT_ID,
                    "secret": CLIENT_SECRET,
                },
                {
                    "id": "lab",
                    "name": "Lab",
                    "issuer": provider.issuer,
                    "client_id": SHORT_CLIENT_ID,
                    "secret": CLIENT_SECRET,
                },
            ]
        )
    )
    settings.OIDC_APPS = apps
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": apps}}
    client = Client()
    page = client.get("/login/").content.decode()
    assert "Sign in with Corp" in page and "Sign in with Lab" in page
    assert 'action="/accounts/oidc/lab/login/"' in page

    answer = client.post("/accounts/oidc/lab/login/", {"next": "/jobs/"})
    assert answer.status_code == 302
    target = urlparse(answer["Location"])
    query = parse_qs(target.query)
    assert f"{target.scheme}://{target.netloc}{target.path}" == provider.discovery()["authorization_endpoint"]
    assert query["client_id"] == [SHORT_CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["redirect_uri"] == ["http://testserver/accounts/oidc/lab/login/callback/"]
    assert set(query["scope"][0].split()) == {"openid", "profile", "email", "groups"}
    assert client.post("/accounts/oidc/nobody/login/").status_code == 404


def _use_provider(settings: Any, provider: Provider) -> None:
    apps = providers_parse(
        json.dumps(
            [
                {
                    "id": "testidp",
                    "name": "Test IdP",
                    "issuer": provider.issuer,
                    "client_id": CLIENT_ID,
                    "secret": CLIENT_SECRET,
                }
            ]
        )
    )
    settings.OIDC_APPS = apps
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": apps}}


def test_a_deactivated_user_cannot_sign_in_through_the_provider(settings: Any, provider: Provider) -> None:
    _use_provider(settings, provider)
    provider.set_user("eve", groups=[])
    client = Client()
    start = client.post("/accounts/oidc/testidp/login/")
    back = provider_sign_in(provider, start["Location"], "eve", "http://testserver/")
    assert client.get(back.removeprefix("http://testserver")).status_code == 302
    assert client.get("/tokens/").status_code == 200  # signed in
    eve = User.objects.get(username="eve")
    eve.is_active = False
    eve.save()

    client = Client()
    start = client.post("/accounts/oidc/testidp/login/")
    back = provider_sign_in(provider, start["Location"], "eve", "http://testserver/")
    answer = client.get(back.removeprefix("http://testserver"), follow=True)
    assert answer.status_code == 403
    assert "This account is deactivated" in answer.content.decode()
    assert client.get("/tokens/").status_code == 302
