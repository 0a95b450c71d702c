"""The invitations API: owners list, create (the link returned once and e-mailed) and revoke a tenant's
invitations; members get 403, other tenants 404; bad input is a field error."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.test import Client

from tenants.models import Invitation, MembershipEvent
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_owner_invites_lists_and_revokes() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner", username="boss")
    client = logged_in(owner)
    url = f"/api/v1/tenants/{tenant.slug}/invitations/"
    response = client.post(
        url, {"email": "dana@example.org", "role": "viewer"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["email"] == "dana@example.org" and body["role"] == "viewer" and body["emailed"] is True
    assert "/invitations/inv_" in body["link"] and body["link"] in mail.outbox[0].body
    listed = client.get(url).json()
    assert [(row["email"], row["created_by"]) for row in listed] == [("dana@example.org", "boss")]
    assert "link" not in listed[0]

    dana = make_user("dana", email="dana@example.org")
    assert client.delete(f"{url}{body['id']}/").status_code == 204
    assert client.get(url).json() == []
    path = "/" + body["link"].split("/", 3)[3]
    assert logged_in(dana).post(path).status_code == 410
    assert client.delete(f"{url}{body['id']}/").status_code == 404
    actions = list(MembershipEvent.objects.values_list("action", flat=True))
    assert actions == ["invite_revoked", "invited"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "nope", "role": "member"}, "email"),
        ({"email": "a@b.org", "role": "king"}, "role"),
        ({"email": "a@b.org", "x": 1}, "x"),
    ],
)
def test_bad_input_is_a_field_error(body: dict[str, Any], field: str) -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    response = logged_in(owner).post(
        f"/api/v1/tenants/{tenant.slug}/invitations/", body, content_type="application/json"
    )
    assert response.status_code == 400 and field in response.json()["errors"]
    assert not Invitation.objects.exists()


def test_members_get_403_and_other_tenants_404() -> None:
    tenant, other = make_tenant(), make_tenant()
    viewer = member(tenant, "member")
    owner_elsewhere = member(other, "owner")
    url = f"/api/v1/tenants/{tenant.slug}/invitations/"
    body = {"email": "dana@example.org"}
    assert logged_in(viewer).get(url).status_code == 403
    assert logged_in(viewer).post(url, body, content_type="application/json").status_code == 403
    assert logged_in(owner_elsewhere).post(url, body, content_type="application/json").status_code == 404
    assert not Invitation.objects.exists()
