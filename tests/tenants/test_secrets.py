"""A tenant's data-store secrets: sealed, write-only (no answer or page carries a value), owners change them,
members see names, other tenants get 404, bad input is a field error with nothing stored, every change is
audited, deletion is refused while a job that may still launch names the secret, and specs that name one
the tenant lacks are refused at submit and dry run (API, page; the CLI in tests/cli)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.test import Client
from rest_framework.test import APIClient

from common import sealing
from jobs.models import Job
from jobs.services import JobRejected, job_cancel, job_submit
from tenants.models import DataStoreSecret, DataStoreSecretEvent
from tenants.secrets import (
    MissingSecret,
    SecretRefused,
    datastore_credentials,
    datastore_secret_create,
    datastore_secret_rotate,
)
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

KEY_ID = "AKIAEXAMPLEKEYID42"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
VALUES = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "region": "eu-west-1"}


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def spec_naming(secret: str) -> dict[str, Any]:
    return {
        "name": "reads-s3",
        "image": "python:3.11",
        "command": ["python", "-c", "print(1)"],
        "volumes": [
            {
                "name": "data",
                "kind": "data",
                "type": "s3",
                "bucket": "datasets",
                "mount_path": "/data",
                "secret": secret,
            }
        ],
    }


def test_values_are_sealed_and_open_only_for_a_launch() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    secret = datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=VALUES)
    assert SECRET not in secret.sealed and KEY_ID not in secret.sealed
    assert secret.keys == ["access_key_id", "region", "secret_access_key"]
    assert sealing.unseal(secret.sealed) == VALUES
    assert datastore_credentials(tenant=tenant, names=["team-data"]) == {"team-data": VALUES}
    with pytest.raises(MissingSecret, match="no data-store secret 'gone'"):
        datastore_credentials(tenant=tenant, names=["team-data", "gone"])


def test_owner_creates_rotates_and_deletes_through_the_api_and_no_answer_carries_a_value() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    client = api(owner)
    url = f"/api/v1/tenants/{tenant.slug}/secrets/"
    created = client.post(url, {"name": "team-data", **VALUES}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "team-data" and body["created_by"] == owner.username
    assert body["keys"] == ["access_key_id", "region", "secret_access_key"]

    rotated = client.put(
        f"{url}team-data/",
        {"access_key_id": "AKIANEW", "secret_access_key": "new-secret-value"},
        format="json",
    )
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["rotated_by"] == owner.username and rotated.json()["keys"] == [
        "access_key_id",
        "secret_access_key",
    ]
    assert (
        datastore_credentials(tenant=tenant, names=["team-data"])["team-data"]["access_key_id"] == "AKIANEW"
    )

    answers = [created, rotated, client.get(url), client.get(f"{url}team-data/")]
    answers.append(client.get(f"/api/v1/tenants/{tenant.slug}/secret-events/"))
    for answer in answers:
        text = answer.content.decode()
        assert (
            SECRET not in text
            and KEY_ID not in text
            and "new-secret-value" not in text
            and "AKIANEW" not in text
        )

    assert client.delete(f"{url}team-data/").status_code == 204
    assert not DataStoreSecret.objects.exists()
    events = client.get(f"/api/v1/tenants/{tenant.slug}/secret-events/").json()
    assert [(e["name"], e["action"], e["actor"]) for e in events] == [
        ("team-data", "deleted", owner.username),
        ("team-data", "rotated", owner.username),
        ("team-data", "created", owner.username),
    ]
    stored = list(DataStoreSecretEvent.objects.values_list("keys", flat=True))
    assert SECRET not in str(stored)


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"access_key_id": "a", "secret_access_key": "b"}, {"name"}),
        ({"name": "bad name", "access_key_id": "a", "secret_access_key": "b"}, {"name"}),
        ({"name": "ok"}, {"access_key_id", "secret_access_key"}),
        ({"name": "ok", "access_key_id": "a", "secret_access_key": "has space"}, {"secret_access_key"}),
        ({"name": "ok", "access_key_id": 5, "secret_access_key": "b"}, {"access_key_id"}),
        ({"name": "ok", "access_key_id": "a", "secret_access_key": "b", "region": "EU West"}, {"region"}),
        ({"name": "ok", "access_key_id": "a", "secret_access_key": "b", "token": "x"}, {"token"}),
        ({"name": "ok", "access_key_id": "a", "secret_access_key": "x" * 1025}, {"secret_access_key"}),
    ],
)
def test_bad_input_is_a_field_error_and_nothing_is_stored(body: dict[str, Any], fields: set[str]) -> None:
    tenant = make_tenant()
    answer = api(member(tenant, "owner")).post(f"/api/v1/tenants/{tenant.slug}/secrets/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert set(answer.json()["errors"]) == fields
    assert "has space" not in answer.content.decode()
    assert not DataStoreSecret.objects.exists() and not DataStoreSecretEvent.objects.exists()


def test_a_second_secret_of_one_name_is_refused() -> None:
    tenant = make_tenant()
    client = api(member(tenant, "owner"))
    url = f"/api/v1/tenants/{tenant.slug}/secrets/"
    assert client.post(url, {"name": "a", **VALUES}, format="json").status_code == 201
    again = client.post(url, {"name": "a", **VALUES}, format="json")
    assert (
        again.status_code == 400
        and "already has a data-store secret 'a'" in again.json()["errors"]["name"][0]
    )
    assert DataStoreSecret.objects.count() == 1


def test_members_see_names_but_only_owners_change_and_other_tenants_get_404() -> None:
    tenant, other = make_tenant(), make_tenant()
    owner = member(tenant, "owner")
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=VALUES)
    for role in ("member", "viewer"):
        client = api(member(tenant, role))
        url = f"/api/v1/tenants/{tenant.slug}/secrets/"
        assert [s["name"] for s in client.get(url).json()] == ["team-data"]
        assert client.post(url, {"name": "b", **VALUES}, format="json").status_code == 403
        assert client.put(f"{url}team-data/", VALUES, format="json").status_code == 403
        assert client.delete(f"{url}team-data/").status_code == 403
    outsider = api(member(other, "owner"))
    url = f"/api/v1/tenants/{tenant.slug}/secrets/"
    assert outsider.get(url).status_code == 404
    assert outsider.post(url, {"name": "b", **VALUES}, format="json").status_code == 404
    assert outsider.get(f"{url}team-data/").status_code == 404
    assert outsider.put(f"{url}team-data/", VALUES, format="json").status_code == 404
    assert outsider.delete(f"{url}team-data/").status_code == 404
    assert outsider.get(f"/api/v1/tenants/{tenant.slug}/secret-events/").status_code == 404
    assert DataStoreSecret.objects.count() == 1 and DataStoreSecretEvent.objects.count() == 1


def test_deleting_a_secret_a_waiting_job_names_is_refused_naming_the_job() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=VALUES)
    job = job_submit(tenant=tenant, user=owner, document=spec_naming("team-data"))
    url = f"/api/v1/tenants/{tenant.slug}/secrets/team-data/"
    refused = api(owner).delete(url)
    assert refused.status_code == 409 and job.pk in refused.json()["detail"], refused.content
    assert DataStoreSecret.objects.count() == 1
    job_cancel(job=job, user=owner)
    assert Job.objects.get(pk=job.pk).is_terminal
    assert api(owner).delete(url).status_code == 204


def test_a_spec_naming_a_secret_the_tenant_lacks_is_a_field_error_at_submit_and_dry_run() -> None:
    tenant = make_tenant()
    user = member(tenant, "owner")
    datastore_secret_create(tenant=tenant, user=user, name="team-data", values=VALUES)
    with pytest.raises(JobRejected) as info:
        job_submit(tenant=tenant, user=user, document=spec_naming("nope"))
    message = info.value.errors["volumes[0].secret"][0]
    assert message.startswith(f"no data-store secret 'nope' in tenant '{tenant.slug}' (it has: team-data)")

    client = api(user)
    answer = client.post(f"/api/v1/jobs/?tenant={tenant.slug}", spec_naming("nope"), format="json")
    assert answer.status_code == 400 and "volumes[0].secret" in answer.json()["errors"]
    page = Client()
    page.force_login(user)
    for button in ("dry_run", "submit"):
        form = {"tenant": tenant.slug, "spec": yaml.safe_dump(spec_naming("nope")), button: "1"}
        response = page.post("/jobs/new/", form)
        assert response.status_code == 400
        text = response.content.decode()
        assert "volumes[0].secret" in text and "no data-store secret &#x27;nope&#x27;" in text
        assert "Would start now" not in text
    assert not Job.objects.exists()
    assert job_submit(tenant=tenant, user=user, document=spec_naming("team-data")).pk


def test_a_secret_of_another_tenant_does_not_count() -> None:
    tenant, other = make_tenant(), make_tenant()
    datastore_secret_create(tenant=other, user=member(other, "owner"), name="team-data", values=VALUES)
    with pytest.raises(JobRejected) as info:
        job_submit(tenant=tenant, user=member(tenant), document=spec_naming("team-data"))
    assert "(it has: none)" in info.value.errors["volumes[0].secret"][0]


def test_the_tenant_page_lists_names_and_lets_owners_change_them_without_showing_values() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    page = Client()
    page.force_login(owner)
    done = page.post(f"/tenants/{tenant.slug}/secrets/", {"name": "team-data", **VALUES})
    assert done.status_code == 302 and done["Location"].endswith("#secrets")
    shown = page.get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'data-secret="team-data"' in shown and "access_key_id, region, secret_access_key" in shown
    assert SECRET not in shown and KEY_ID not in shown and "Add secret" in shown

    bad = page.post(f"/tenants/{tenant.slug}/secrets/", {"name": "x", "access_key_id": "AKIATYPED"})
    assert bad.status_code == 400
    assert "secret_access_key" in bad.content.decode() and "AKIATYPED" not in bad.content.decode()

    rotated = page.post(
        f"/tenants/{tenant.slug}/secrets/team-data/rotate/",
        {"access_key_id": "AKIAROT", "secret_access_key": "rotated-value"},
    )
    assert rotated.status_code == 302
    assert (
        datastore_credentials(tenant=tenant, names=["team-data"])["team-data"]["access_key_id"] == "AKIAROT"
    )
    after = page.get(f"/tenants/{tenant.slug}/").content.decode()
    assert "rotated-value" not in after and "AKIAROT" not in after and f"by {owner.username}" in after

    viewer = Client()
    viewer.force_login(member(tenant, "member"))
    seen = viewer.get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'data-secret="team-data"' in seen and "Add secret" not in seen
    refused = viewer.post(f"/tenants/{tenant.slug}/secrets/team-data/delete/")
    assert refused.status_code == 403 and DataStoreSecret.objects.count() == 1
    outsider = Client()
    outsider.force_login(member(make_tenant(), "owner"))
    assert outsider.post(f"/tenants/{tenant.slug}/secrets/team-data/delete/").status_code == 404

    assert page.post(f"/tenants/{tenant.slug}/secrets/team-data/delete/").status_code == 302
    assert not DataStoreSecret.objects.exists()


def test_services_refuse_non_owners() -> None:
    tenant = make_tenant()
    with pytest.raises(SecretRefused) as info:
        datastore_secret_create(tenant=tenant, user=member(tenant), name="a", values=VALUES)
    assert info.value.status == 403
    secret = datastore_secret_create(tenant=tenant, user=member(tenant, "owner"), name="a", values=VALUES)
    with pytest.raises(SecretRefused):
        datastore_secret_rotate(secret=secret, user=member(tenant, "viewer"), values=VALUES)
