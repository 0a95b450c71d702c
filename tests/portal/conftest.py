"""Fixtures the page tests share: a tenant, one of its members, and a client signed in as her."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tenants.models import Tenant
from tests.factories import make_tenant, member


@pytest.fixture
def team() -> Tenant:
    return make_tenant("alpha")


@pytest.fixture
def alice(team: Tenant) -> User:
    return member(team, "member", username="alice")


@pytest.fixture
def signed_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client
