"""A tenant whose jobs wait on a namespace this installation does not own: its page tells a platform admin
how to resolve it (another prefix, or the exact labels to set), and tells nothing of it to members."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs import cluster
from tenants.models import Tenant
from tests.factories import make_job, make_user

pytestmark = pytest.mark.django_db

NOT_OWNED = "namespace ty-alpha exists and is not managed by this installation"


@pytest.fixture
def admin() -> Client:
    """A client of its own, signed in as a platform admin (next to a member's `signed_in`)."""
    client = Client()
    client.force_login(make_user(username="root", is_staff=True, is_superuser=True))
    return client


def test_a_platform_admin_is_told_how_to_resolve_a_namespace_not_owned(
    admin: Client, team: Tenant, alice: User, settings: Any
) -> None:
    settings.TENANT_NAMESPACE_PREFIX = "ty"
    settings.INSTALLATION_ID = "prod-a"
    make_job(team, alice, status="requeued", reason="NamespaceNotOwned", message=NOT_OWNED)
    page = admin.get("/tenants/alpha/").content.decode()
    assert "namespace ty-alpha is not this installation" in page
    assert "TENANT_NAMESPACE_PREFIX" in page
    command = (
        "kubectl label namespace ty-alpha trainyard.io/tenant=alpha app.kubernetes.io/managed-by=trainyard "
        "trainyard.io/installation=prod-a --overwrite"
    )
    assert command in page
    assert command == cluster.ownership_command("ty-alpha", "alpha")


def test_the_resolution_is_not_shown_to_members_nor_when_nothing_waits_on_it(
    signed_in: Client, admin: Client, team: Tenant, alice: User
) -> None:
    make_job(team, alice, status="queued", reason="Waiting", message="waits for GPUs")
    assert "namespace-not-owned" not in admin.get("/tenants/alpha/").content.decode()
    make_job(team, alice, status="requeued", reason="NamespaceNotOwned", message=NOT_OWNED)
    assert "namespace-not-owned" not in signed_in.get("/tenants/alpha/").content.decode()
