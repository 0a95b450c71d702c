"""REST API for tenants: only my tenants, with quota, usage and my role; another tenant is 404."""

import pytest
from django.test import Client

from jobs.services import job_submit
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_tenant_list_shows_mine_with_quota_usage_and_role() -> None:
    mine, _other = make_tenant(gpus=4), make_tenant()
    user = member(mine, "owner")
    job_submit(tenant=mine, user=user, document={"name": "a", "image": "b", "command": ["c"]})
    body = logged_in(user).get("/api/v1/tenants/").json()
    assert [t["slug"] for t in body] == [mine.slug]
    assert (
        body[0]["role"] == "owner" and body[0]["quota"]["gpus"] == 4 and body[0]["usage"]["queued_jobs"] == 1
    )


def test_other_tenant_is_404_on_detail_and_members() -> None:
    mine, other = make_tenant(), make_tenant()
    client = logged_in(member(mine))
    assert client.get(f"/api/v1/tenants/{other.slug}/").status_code == 404
    assert client.get(f"/api/v1/tenants/{other.slug}/members/").status_code == 404


def test_members_list_hides_emails_from_non_owners() -> None:
    tenant = make_tenant()
    member(tenant, "owner", email="boss@example.org")
    viewer = member(tenant, "viewer")
    rows = logged_in(viewer).get(f"/api/v1/tenants/{tenant.slug}/members/").json()
    assert len(rows) == 2 and all("email" not in row for row in rows)
