"""ID-token validation (portal.sso.id_token_verify, what every sign-in goes through) with real tokens and the
real keys of the test provider: a token it issued passes; one altered after signing, one signed by another
key, one unsigned, one for another client and one expired are refused."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from cryptography.hazmat.primitives.asymmetric import rsa

from portal.sso import id_token_verify
from tests.sso.provider import CLIENT_ID, SHORT_CLIENT_ID, Provider


def _verify(provider: Provider, token: str, client_id: str = CLIENT_ID) -> dict[str, Any]:
    config = provider.discovery()
    return id_token_verify(token, keys_url=config["jwks_uri"], issuer=config["issuer"], client_id=client_id)


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _parts(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, payload, signature = token.split(".")
    return (
        json.loads(base64.urlsafe_b64decode(header + "==")),
        json.loads(base64.urlsafe_b64decode(payload + "==")),
        signature,
    )


def test_a_token_the_provider_issued_passes_with_its_groups(provider: Provider) -> None:
    provider.set_user("ivy", groups=["ml-vision"])
    claims = _verify(provider, provider.id_token("ivy"))
    assert claims["sub"] == "ivy"
    assert claims["groups"] == ["ml-vision"]
    assert claims["iss"] == provider.issuer
    header, _, _ = _parts(provider.id_token("ivy"))
    assert header["alg"] == "RS256"


def test_a_token_altered_after_signing_is_refused(provider: Provider) -> None:
    provider.set_user("ivy", groups=["ml-vision"])
    header, payload, signature = _parts(provider.id_token("ivy"))
    payload["groups"] = ["ml-vision-admins"]
    with pytest.raises(OAuth2Error, match="Invalid id_token"):
        _verify(provider, f"{_b64(header)}.{_b64(payload)}.{signature}")


def test_a_token_signed_by_another_key_or_none_is_refused(provider: Provider) -> None:
    provider.set_user("ivy", groups=["ml-vision"])
    header, payload, _ = _parts(provider.id_token("ivy"))
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(payload, stranger, algorithm="RS256", headers={"kid": header["kid"]})
    with pytest.raises(OAuth2Error, match="Invalid id_token"):
        _verify(provider, forged)
    unsigned = f"{_b64({'alg': 'none', 'kid': header['kid']})}.{_b64(payload)}."
    with pytest.raises(OAuth2Error, match="not an accepted algorithm"):
        _verify(provider, unsigned)
    symmetric = jwt.encode(
        payload, "a-shared-secret-long-enough-for-hs256!", algorithm="HS256", headers={"kid": header["kid"]}
    )
    with pytest.raises(OAuth2Error, match="not an accepted algorithm"):
        _verify(provider, symmetric)


def test_a_token_for_another_client_is_refused(provider: Provider) -> None:
    provider.set_user("ivy", groups=[])
    token = provider.id_token("ivy", client_id=SHORT_CLIENT_ID)
    with pytest.raises(OAuth2Error, match="Invalid id_token"):
        _verify(provider, token, client_id=CLIENT_ID)


def test_an_expired_token_is_refused(provider: Provider) -> None:
    provider.set_user("ivy", groups=["ml-vision"])
    token = provider.id_token("ivy", client_id=SHORT_CLIENT_ID)  # the provider gives it one second
    _, payload, _ = _parts(token)
    assert payload["exp"] - payload["iat"] == 1
    while time.time() <= payload["exp"] + 0.5:  # until the provider's own expiry has passed
        time.sleep(0.1)
    with pytest.raises(OAuth2Error, match="Invalid id_token"):
        _verify(provider, token, client_id=SHORT_CLIENT_ID)
