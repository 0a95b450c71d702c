"""`seed_demo` (run by `make up`): the demo logins work, re-running is safe, production refuses it."""

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from tenants.models import Membership, Quota, Tenant

pytestmark = pytest.mark.django_db


@override_settings(LOCAL_SETUP=True)
def test_admin_logs_in_and_sees_tenant_demo_with_its_quota(client: Client) -> None:
    call_command("seed_demo")
    response = client.post("/admin/login/?next=/admin/", {"username": "admin", "password": "admin"})
    assert response.status_code == 302
    page = client.get("/admin/tenants/tenant/")
    assert page.status_code == 200
    assert "demo" in page.content.decode()
    assert "0 / 4" in page.content.decode()  # GPUs used / quota


@override_settings(LOCAL_SETUP=True)
def test_seed_demo_twice_changes_nothing() -> None:
    call_command("seed_demo")
    call_command("seed_demo")
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert Quota.objects.filter(tenant__slug="demo").count() == 1
    assert Membership.objects.get(user__username="demo").role == "member"


@override_settings(LOCAL_SETUP=True)
def test_demo_user_is_a_member_but_not_staff(client: Client) -> None:
    call_command("seed_demo")
    response = client.post("/login/", {"username": "demo", "password": "demo"})
    assert response.status_code == 302, "logged in and sent on"
    assert client.get("/admin/").status_code == 302


def test_seed_demo_refuses_outside_local_settings() -> None:
    with pytest.raises(CommandError, match="only under local settings"):
        call_command("seed_demo")
    assert not Tenant.objects.exists()


def test_home_is_the_dashboard_behind_the_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302 and response["Location"] == "/login/?next=/"


def test_healthz_answers_ok(client: Client) -> None:
    assert client.get("/healthz").content == b"ok"


@override_settings(LOCAL_SETUP=True)
def test_seed_demo_gives_the_demo_tenant_the_embedded_s3_secret_and_endpoint() -> None:
    from portal import demo_s3
    from tenants.models import DataStoreSecret, DataStoreSecretEvent
    from tenants.policy import policy_of
    from tenants.secrets import datastore_credentials

    call_command("seed_demo")
    call_command("seed_demo")
    tenant = Tenant.objects.get(slug="demo")
    assert policy_of(tenant).datastore_hosts == ["host.kubesim.internal"]
    assert DataStoreSecret.objects.get(tenant=tenant).name == demo_s3.SECRET_NAME
    assert datastore_credentials(tenant=tenant, names=[demo_s3.SECRET_NAME])[demo_s3.SECRET_NAME] == {
        "access_key_id": demo_s3.ACCESS_KEY_ID,
        "secret_access_key": demo_s3.SECRET_ACCESS_KEY,
        "region": demo_s3.REGION,
        "endpoint": "http://host.kubesim.internal:9000",
    }
    assert list(DataStoreSecretEvent.objects.values_list("action", "actor__username")) == [
        ("created", "admin")
    ], "seeding twice changes nothing"


@override_settings(LOCAL_SETUP=True)
def test_seed_demo_gives_an_older_demo_secret_its_endpoint() -> None:
    """A demo secret seeded before secrets carried endpoints is set again, with the endpoint."""
    from portal import demo_s3
    from tenants.models import DataStoreSecretEvent
    from tenants.secrets import datastore_credentials, datastore_secret_rotate

    call_command("seed_demo")
    tenant = Tenant.objects.get(slug="demo")
    secret = tenant.datastore_secrets.get()
    old = {"access_key_id": demo_s3.ACCESS_KEY_ID, "secret_access_key": demo_s3.SECRET_ACCESS_KEY}
    datastore_secret_rotate(secret=secret, user=User.objects.get(username="admin"), values=old)
    call_command("seed_demo")
    values = datastore_credentials(tenant=tenant, names=[secret.name])[secret.name]
    assert values["endpoint"] == "http://host.kubesim.internal:9000"
    assert list(DataStoreSecretEvent.objects.values_list("action", flat=True)) == [
        "rotated",
        "rotated",
        "created",
    ]
