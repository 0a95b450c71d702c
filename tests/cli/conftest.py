"""Fixtures of the CLI tests: a fresh HOME for the CLI's config, and an account on a live server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tenants.models import Tenant
from tenants.tokens import token_create
from tests.factories import make_tenant, member
from trainyard import cli, config


@dataclass
class Account:
    """A member of one tenant, with an API token, and the server's URL."""

    url: str
    tenant: Tenant
    user: User
    token: str


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME (so a fresh config file), no Trainyard variables, and quick log polling."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(config.URL_ENV, raising=False)
    monkeypatch.delenv(config.TOKEN_ENV, raising=False)
    monkeypatch.setattr(cli, "POLL_SECONDS", 0.1)
    return tmp_path


@pytest.fixture
def account(live_server: Any, home: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """A user and tenant on the live server; the CLI finds them through TRAINYARD_URL/TRAINYARD_TOKEN."""
    tenant = make_tenant()
    user = member(tenant)
    _, secret = token_create(user=user, name="cli-tests", scope="admin")  # every command, secrets included
    monkeypatch.setenv(config.URL_ENV, live_server.url)
    monkeypatch.setenv(config.TOKEN_ENV, secret)
    return Account(url=live_server.url, tenant=tenant, user=user, token=secret)
