"""Nominal quota, borrowing limits and cohort: shown by the tenant API, changed by platform admins through
PATCH /api/v1/tenants/<slug>/quota/ and the admin console, bad values refused field by field."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tenants.models import Quota
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def patch(client: Client, slug: str, body: Any) -> Any:
    return client.patch(f"/api/v1/tenants/{slug}/quota/", body, content_type="application/json")


def test_tenant_api_shows_nominal_quota_borrowing_limits_and_cohort_with_defaults() -> None:
    tenant = make_tenant(slug="vision", gpus=4)
    quota = logged_in(member(tenant)).get("/api/v1/tenants/vision/").json()["quota"]
    assert quota["gpus"] == 4
    assert (quota["gpus_borrowing_limit"], quota["cpu_millis_borrowing_limit"]) == (0, 0)
    assert quota["memory_mib_borrowing_limit"] == 0 and quota["cohort"] == ""


def test_only_platform_admins_change_a_quota_and_members_read_it() -> None:
    tenant = make_tenant(slug="vision", gpus=4)
    owner = member(tenant, "owner")
    body = {"gpus": 6, "gpus_borrowing_limit": None, "cohort": "research"}
    assert patch(logged_in(owner), "vision", body).status_code == 403
    assert Quota.objects.get(tenant=tenant).gpus == 4
    admin = make_user(is_superuser=True, is_staff=True)
    response = patch(logged_in(admin), "vision", body)
    assert response.status_code == 200
    assert (response.json()["gpus"], response.json()["gpus_borrowing_limit"]) == (6, None)
    quota = Quota.objects.get(tenant=tenant)
    assert (quota.gpus, quota.gpus_borrowing_limit, quota.cohort, quota.cpu_millis) == (
        6,
        None,
        "research",
        32000,
    )
    read = logged_in(owner).get("/api/v1/tenants/vision/quota/").json()
    assert read["cohort"] == "research" and read["gpus_borrowing_limit"] is None


def test_other_tenants_quota_is_404() -> None:
    make_tenant(slug="vision")
    other = make_tenant(slug="nlp")
    assert logged_in(member(other)).get("/api/v1/tenants/vision/quota/").status_code == 404


def test_bad_quota_values_are_refused_field_by_field_and_nothing_changes() -> None:
    tenant = make_tenant(slug="vision", gpus=4)
    admin = logged_in(make_user(is_superuser=True, is_staff=True))
    response = patch(admin, "vision", {"gpus": 8, "colour": "blue"})
    assert response.status_code == 400 and set(response.json()["errors"]) == {"colour"}
    body = {"gpus": 8, "gpus_borrowing_limit": -1, "memory_mib": -5, "cohort": "not a slug!"}
    response = patch(admin, "vision", body)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"gpus_borrowing_limit", "memory_mib", "cohort"}
    response = patch(admin, "vision", {"cpu_millis_borrowing_limit": "lots"})
    assert response.status_code == 400 and set(response.json()["errors"]) == {"cpu_millis_borrowing_limit"}
    assert patch(admin, "vision", ["gpus"]).status_code == 400
    quota = Quota.objects.get(tenant=tenant)
    assert (quota.gpus, quota.gpus_borrowing_limit, quota.cohort) == (4, 0, "")


def _change_form(tenant_pk: int, **quota: str) -> dict[str, str]:
    """The tenant change form as the admin console posts it, with the quota inline's fields."""
    form = {
        "slug": "vision", "name": "Vision", "weight": "1.0", "active": "on",
        "quota-TOTAL_FORMS": "1", "quota-INITIAL_FORMS": "1", "quota-MIN_NUM_FORMS": "1",
        "quota-MAX_NUM_FORMS": "1", "quota-0-tenant": str(tenant_pk),
        "quota-0-id": str(Quota.objects.get(tenant_id=tenant_pk).pk),
        "quota-0-gpus": "4", "quota-0-cpu_millis": "8000", "quota-0-memory_mib": "16384",
        "quota-0-gpus_borrowing_limit": "0", "quota-0-cpu_millis_borrowing_limit": "0",
        "quota-0-memory_mib_borrowing_limit": "0", "quota-0-cohort": "",
        "quota-0-max_running_jobs": "4", "quota-0-max_queued_jobs": "10",
        "quota-0-storage_gib": "500", "quota-0-max_claims": "50",
        "policy-TOTAL_FORMS": "0", "policy-INITIAL_FORMS": "0", "policy-MIN_NUM_FORMS": "0",
        "policy-MAX_NUM_FORMS": "1",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    form.update({f"quota-0-{name}": value for name, value in quota.items()})
    return form


def test_admin_console_sets_borrowing_limits_and_cohort_and_refuses_negative_ones() -> None:
    tenant = make_tenant(slug="vision", gpus=4)
    client = logged_in(make_user(is_superuser=True, is_staff=True))
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    page = client.get(url).content.decode()
    assert "Borrowing from the cohort" in page and "borrows nothing (hard quota)" in page
    response = client.post(url, _change_form(tenant.pk, gpus_borrowing_limit="-2"))
    assert (
        response.status_code == 200
        and "Ensure this value is greater than or equal to 0" in response.content.decode()
    )
    assert Quota.objects.get(tenant=tenant).gpus_borrowing_limit == 0
    response = client.post(url, _change_form(tenant.pk, gpus_borrowing_limit="", cohort="research"))
    assert response.status_code == 302
    quota = Quota.objects.get(tenant=tenant)
    assert (quota.gpus_borrowing_limit, quota.cohort) == (None, "research")
    assert "borrows GPUs no limit (cohort research)" in client.get(url).content.decode()


def test_admins_set_the_fair_share_weight_with_the_quota_and_a_bad_one_changes_nothing() -> None:
    tenant = make_tenant(slug="vision")
    admin = logged_in(make_user(is_superuser=True, is_staff=True))
    assert admin.get("/api/v1/tenants/vision/quota/").json()["weight"] == 1.0
    bad = patch(admin, "vision", {"weight": 0, "gpus": 2})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"weight"}
    tenant.refresh_from_db()
    assert tenant.weight == 1.0 and Quota.objects.get(tenant=tenant).gpus != 2
    good = patch(admin, "vision", {"weight": 2.5, "gpus": 2})
    assert good.status_code == 200 and good.json()["weight"] == 2.5 and good.json()["gpus"] == 2
    tenant.refresh_from_db()
    assert tenant.weight == 2.5
