"""API token scopes and expiry, through the API: a read token only reads, a submit token also writes jobs
(submit, labels, cancel) but not tenant settings, secrets, notifications or tokens, an admin token does
all its user's role allows; new tokens expire after 90 days unless their owner picks another expiry (at
most the platform's maximum), and an expired token is a 401 that says so. Sessions are not scoped."""

from __future__ import annotations

import base64
import importlib
import json
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.test import Client
from django.utils import timezone

from jobs.models import Job
from tenants.models import ApiToken, DataStoreSecret
from tenants.tokens import token_create
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}
SECRET_VALUES = {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "wJalrXUtnFEMI-K7MDENG", "region": "eu"}


def bearer(user: Any, scope: str, **fields: Any) -> Client:
    _, secret = token_create(user=user, name=scope, scope=scope, **fields)
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def post(client: Client, path: str, body: Any = None) -> Any:
    return client.post(path, json.dumps(body or {}), content_type="application/json")


def submit(client: Client, tenant: Any) -> Any:
    return post(client, f"/api/v1/jobs/?tenant={tenant.slug}", {"spec": json.dumps(SPEC)})


def test_a_read_token_reads_but_gets_403_on_submit_saying_which_scope_it_needs() -> None:
    tenant = make_tenant()
    client = bearer(member(tenant, "owner"), "read")
    assert client.get("/api/v1/jobs/").status_code == 200
    assert client.get(f"/api/v1/tenants/{tenant.slug}/").status_code == 200
    assert post(client, "/api/v1/spec/validate/", {"spec": json.dumps(SPEC)}).status_code == 200, (
        "stores nothing"
    )
    refused = submit(client, tenant)
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "this token's scope is read: POST /api/v1/jobs/ needs a token with scope submit"
    )
    assert not Job.objects.exists()


def test_a_submit_token_writes_jobs_but_not_secrets_notifications_or_tokens() -> None:
    tenant = make_tenant()
    client = bearer(member(tenant, "owner"), "submit")
    created = submit(client, tenant)
    assert created.status_code == 201, created.content
    job = created.json()["id"]
    relabel = client.patch(f"/api/v1/jobs/{job}/", {"tags": ["a"]}, content_type="application/json")
    assert relabel.status_code == 200, relabel.content
    assert post(client, f"/api/v1/jobs/{job}/cancel/").status_code == 200

    secret = post(client, f"/api/v1/tenants/{tenant.slug}/secrets/", {"name": "data", **SECRET_VALUES})
    assert secret.status_code == 403 and "needs a token with scope admin" in secret.json()["detail"]
    assert not DataStoreSecret.objects.exists()
    hook = {
        "tenant": tenant.slug,
        "name": "x",
        "channel": "webhook",
        "url": "http://127.0.0.1:9/",
        "events": ["failed"],
    }
    assert post(client, "/api/v1/notifications/", hook).status_code == 403
    assert post(client, "/api/v1/tokens/", {"name": "more", "scope": "read"}).status_code == 403


def test_an_admin_token_does_what_the_role_allows_and_no_more() -> None:
    tenant = make_tenant()
    owner_token = bearer(member(tenant, "owner"), "admin")
    created = post(owner_token, f"/api/v1/tenants/{tenant.slug}/secrets/", {"name": "data", **SECRET_VALUES})
    assert created.status_code == 201, created.content
    member_token = bearer(member(tenant), "admin")
    refused = post(member_token, f"/api/v1/tenants/{tenant.slug}/secrets/", {"name": "more", **SECRET_VALUES})
    assert refused.status_code == 403, "the role still decides"
    assert submit(member_token, tenant).status_code == 201


def test_a_session_is_not_limited_by_any_scope() -> None:
    tenant = make_tenant()
    client = Client()
    client.force_login(member(tenant, "owner"))
    assert (
        post(client, f"/api/v1/tenants/{tenant.slug}/secrets/", {"name": "d", **SECRET_VALUES}).status_code
        == 201
    )


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/ffdl/v1/models"])
def test_an_expired_token_is_a_401_that_says_it_expired(path: str) -> None:
    user = member(make_tenant())
    token, secret = token_create(user=user, name="old", expires_at=timezone.now() + timedelta(hours=1))
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    response = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get(path)
    assert response.status_code == 401
    assert "this token expired at" in response.content.decode()
    basic = base64.b64encode(f"team:{secret}".encode()).decode()
    ffdl = Client(HTTP_AUTHORIZATION=f"Basic {basic}").get("/ffdl/v1/models")
    assert ffdl.status_code == 401 and "this token expired at" in ffdl.content.decode(), (
        "FfDL's basic auth too"
    )


def test_new_tokens_are_submit_and_expire_after_the_default_unless_their_owner_picks_an_expiry(
    settings: Any,
) -> None:
    settings.API_TOKEN_DEFAULT_DAYS, settings.API_TOKEN_MAX_DAYS = 90, 365
    client = Client()
    client.force_login(member(make_tenant()))
    default = post(client, "/api/v1/tokens/", {"name": "laptop"}).json()
    assert default["scope"] == "submit"
    expiry = ApiToken.objects.get(pk=default["id"]).expires_at
    assert expiry is not None and abs(expiry - timezone.now() - timedelta(days=90)) < timedelta(minutes=1)
    chosen = timezone.now() + timedelta(days=300)
    picked = post(
        client, "/api/v1/tokens/", {"name": "ci", "scope": "read", "expires_at": chosen.isoformat()}
    )
    assert picked.status_code == 201 and ApiToken.objects.get(pk=picked.json()["id"]).expires_at == chosen
    too_far = (timezone.now() + timedelta(days=366)).isoformat()
    refused = post(client, "/api/v1/tokens/", {"name": "forever", "expires_at": too_far})
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"expires_at": ["must be at most 365 days ahead (API_TOKEN_MAX_DAYS)"]}


def test_the_migration_keeps_existing_tokens_admin_and_gives_never_expiring_ones_90_days() -> None:
    migration = importlib.import_module("tenants.migrations.0009_token_scopes")
    user = member(make_tenant())
    forever, _ = token_create(user=user, name="old", scope="admin")
    ApiToken.objects.filter(pk=forever.pk).update(expires_at=None)
    soon = timezone.now() + timedelta(days=2)
    dated, _ = token_create(user=user, name="dated", scope="admin", expires_at=soon)
    migration.existing_tokens_expire(django_apps, None)
    forever.refresh_from_db()
    dated.refresh_from_db()
    assert forever.expires_at is not None
    assert abs(forever.expires_at - timezone.now() - timedelta(days=90)) < timedelta(minutes=1)
    assert dated.expires_at == soon, "a token that already expires keeps its expiry"
    field = ApiToken._meta.get_field("scope")
    assert field.default == "submit"
    add = next(op for op in migration.Migration.operations if getattr(op, "name", "") == "scope")
    assert add.field.default == "admin", "rows that existed before scopes become admin"
