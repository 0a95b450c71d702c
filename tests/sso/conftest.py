"""Fixtures of the single sign-on tests: the real OpenID provider (tests/sso/provider.py) for the session,
and portal servers (daphne, as the browser tests run it) configured to use it: one with local passwords on,
one with them off. The browser is the browser tests' Chromium (tests/e2e/conftest.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import _test_database_name, browser, open_page  # noqa: F401 - fixtures used here
from tests.sso.provider import CLIENT_ID, CLIENT_SECRET, Provider, oidc_provider, provider_missing
from tests.web_process import web_process

GROUP_MAP = {"ml-vision-admins": "vision:owner", "ml-vision": "vision:member", "ml-nlp": "nlp:viewer"}


@pytest.fixture(scope="session")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """The test OpenID provider, for the whole session; skips where Node.js or its packages are missing,
    except in CI (`.ci/run` sets `TRAINYARD_CI`), where a provider that did not install is a failure, not a
    quiet skip."""
    missing = provider_missing()
    if missing:
        if os.environ.get("TRAINYARD_CI"):
            pytest.fail(f"CI: {missing}")
        pytest.skip(missing)
    with oidc_provider(tmp_path_factory.mktemp("oidc-provider")) as running:
        yield running


def _sso_env(provider: Provider, **extra: str) -> dict[str, str]:
    providers = [
        {
            "id": "testidp",
            "name": "Test IdP",
            "issuer": provider.issuer,
            "client_id": CLIENT_ID,
            "secret": CLIENT_SECRET,
        }
    ]
    return {
        "KUBECONFIG": "",
        "OIDC_PROVIDERS": json.dumps(providers),
        "OIDC_GROUP_MAP": json.dumps(GROUP_MAP),
        **extra,
    }


@pytest.fixture(scope="package")
def sso_server_url(
    provider: Provider,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A portal server signing in through the test provider; local passwords on."""
    name = _test_database_name(django_db_blocker)
    with web_process(name, _sso_env(provider), tmp_path_factory.mktemp("sso-server")) as url:
        yield url


@pytest.fixture(scope="package")
def sso_only_server_url(
    provider: Provider,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A portal server with local passwords off (LOCAL_LOGIN_ENABLED=false)."""
    name = _test_database_name(django_db_blocker)
    env = _sso_env(provider, LOCAL_LOGIN_ENABLED="false")
    with web_process(name, env, tmp_path_factory.mktemp("sso-only-server")) as url:
        yield url


@pytest.fixture
def page(browser: Any, sso_server_url: str, transactional_db: None) -> Iterator[Any]:  # noqa: F811
    with open_page(browser, sso_server_url) as opened:
        yield opened


def sso_login(page: Any, username: str, password: str = "idp-pw") -> None:  # noqa: S107
    """Sign in with the test provider from the portal's login page (the provider asks for the password
    only when it has no session of its own), and wait to be back on the portal."""
    if "/interaction/" not in page.url:
        if "/login/" not in page.url:
            page.goto("/login/")
        page.click("button[data-action=sso][data-provider=testidp]")
        page.wait_for_url(
            lambda url: "/interaction/" in url or ("/login/" not in url and "/accounts/" not in url)
        )
    if "/interaction/" in page.url:
        page.fill("input[name=login]", username)
        page.fill("input[name=password]", password)
        page.click("button[data-action=idp-sign-in]")
    page.wait_for_url(
        lambda url: "/interaction/" not in url and "/accounts/" not in url and "/login/" not in url
    )
