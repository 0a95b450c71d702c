"""Registry credentials in the admin console: listed, searched, filtered and viewed without the password (no
page, field or URL filter gives out the sealed value), never added or changed there, deleted only through
the service so the audit records it; the audit itself is read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from tenants.models import RegistryCredential, RegistryCredentialEvent
from tenants.registries import registry_credential_create
from tenants.registry_admin import ADD_NOTE
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db

PASSWORD = "glpat-Admin-Registry-0001"
CHANGELIST = "admin:tenants_registrycredential_changelist"


@pytest.fixture
def root(client: Client) -> Client:
    client.force_login(make_user(username="root", is_staff=True, is_superuser=True))
    return client


def credential(slug: str, name: str = "team", host: str = "registry.example.com") -> RegistryCredential:
    tenant = make_tenant(slug=slug)
    return registry_credential_create(
        tenant=tenant,
        user=member(tenant, "owner", username=f"{slug}-owner"),
        name=name,
        host=host,
        values={"username": f"robot-{slug}", "password": PASSWORD},
    )


def test_the_list_shows_each_credential_but_never_its_password(root: Client) -> None:
    vision, audio = credential("vision"), credential("audio", name="hub", host="docker.io")
    page = root.get(reverse(CHANGELIST))
    assert page.status_code == 200
    html = page.content.decode()
    for row in (vision, audio):
        assert (
            row.name in html
            and row.host in html
            and row.username in html
            and f"{row.tenant.slug}-owner" in html
        )
        assert row.sealed not in html
    assert PASSWORD not in html
    assert ADD_NOTE.split("'")[0] in html  # the rest is HTML-escaped
    assert reverse("admin:tenants_registrycredential_add") not in html

    searched = root.get(reverse(CHANGELIST), {"q": "docker.io"}).content.decode()
    assert "robot-audio" in searched and "robot-vision" not in searched
    filtered = root.get(reverse(CHANGELIST), {"tenant__id__exact": vision.tenant_id}).content.decode()
    assert "robot-vision" in filtered and "robot-audio" not in filtered


def test_no_page_or_url_filter_gives_out_the_sealed_value(root: Client) -> None:
    row = credential("vision")
    page = root.get(reverse("admin:tenants_registrycredential_change", args=[row.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "robot-vision" in html and "sealed, never shown" in html
    assert row.sealed not in html and PASSWORD not in html
    assert 'name="sealed"' not in html and 'name="password"' not in html and "<textarea" not in html
    prefix = row.sealed[:8]
    assert root.get(reverse(CHANGELIST), {"sealed__startswith": prefix}).status_code == 400
    assert root.get(reverse(CHANGELIST), {"sealed": row.sealed}).status_code == 400
    assert root.get(reverse(CHANGELIST), {"o": "1", "q": prefix}).content.decode().count("robot-vision") == 0


def test_credentials_are_neither_added_nor_changed_here(root: Client) -> None:
    row = credential("vision")
    assert root.get(reverse("admin:tenants_registrycredential_add")).status_code == 403
    change = reverse("admin:tenants_registrycredential_change", args=[row.pk])
    posted = root.post(change, {"username": "intruder", "sealed": "x", "host": "evil.example"})
    assert posted.status_code == 403
    row.refresh_from_db()
    assert (row.username, row.host) == ("robot-vision", "registry.example.com")


def test_deleting_goes_through_the_service_and_is_audited(root: Client) -> None:
    row = credential("vision")
    url = reverse("admin:tenants_registrycredential_delete", args=[row.pk])
    confirm = root.get(url)
    assert confirm.status_code == 200 and row.sealed not in confirm.content.decode()
    assert root.post(url, {"post": "yes"}).status_code == 302
    assert not RegistryCredential.objects.exists()
    event = RegistryCredentialEvent.objects.select_related("actor").get(action="deleted")
    assert (event.tenant, event.name, event.host, event.actor.username) == (
        row.tenant,
        "team",
        "registry.example.com",
        "root",
    )


def test_the_bulk_delete_action_audits_each_credential(root: Client) -> None:
    rows = [credential("vision"), credential("audio")]
    answer = root.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [r.pk for r in rows], "post": "yes"},
    )
    assert answer.status_code == 302
    assert not RegistryCredential.objects.exists()
    deleted = RegistryCredentialEvent.objects.filter(action="deleted", actor__username="root")
    assert sorted(deleted.values_list("tenant__slug", flat=True)) == ["audio", "vision"]


def test_a_staff_user_who_is_not_an_owner_cannot_delete(client: Client) -> None:
    row = credential("vision")
    staff = make_user(username="ops", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_registrycredential", "delete_registrycredential"])
    )
    client.force_login(staff)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    url = reverse("admin:tenants_registrycredential_delete", args=[row.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert RegistryCredential.objects.exists()
    assert not RegistryCredentialEvent.objects.filter(action="deleted").exists()


def test_the_audit_is_read_only(root: Client) -> None:
    row = credential("vision")
    event = RegistryCredentialEvent.objects.get()
    page = root.get(reverse("admin:tenants_registrycredentialevent_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "registry.example.com" in html and "vision-owner" in html and row.sealed not in html
    assert root.get(reverse("admin:tenants_registrycredentialevent_add")).status_code == 403
    delete = reverse("admin:tenants_registrycredentialevent_delete", args=[event.pk])
    assert root.post(delete, {"post": "yes"}).status_code == 403
    change = reverse("admin:tenants_registrycredentialevent_change", args=[event.pk])
    assert root.get(change).status_code == 200
    assert root.post(change, {"action": "deleted"}).status_code == 403
    assert RegistryCredentialEvent.objects.get().action == "created"
