"""A tenant's private registry credentials: the password sealed and write-only (no answer carries it), owners
change them, members see names and hosts, other tenants get 404, a host outside the tenant's
`image_registries` policy or any bad field is a field error with nothing stored, every change is audited,
and what a launch builds from them (the pods' imagePullSecrets, the dockerconfigjson Secret)."""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import pytest
from django.test import Client
from rest_framework.test import APIClient

from clusterio import names
from clusterio.builders import RegistryLogin, make_learner_pod, make_pull_secret, to_dict
from common import sealing
from jobs import cluster
from jobs.services import job_submit
from tenants.models import RegistryCredential, RegistryCredentialEvent
from tenants.registries import (
    RegistryRefused,
    host_allowed,
    registry_auth,
    registry_credential_create,
    registry_credential_rotate,
    registry_hint,
)
from tests.factories import SPEC, allow, make_tenant, member

pytestmark = pytest.mark.django_db

PASSWORD = "glpat-Registry-Token-0001"
LOGIN = {"username": "robot$team", "password": PASSWORD}


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_password_is_sealed_and_opened_only_for_a_launch() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    credential = registry_credential_create(
        tenant=tenant, user=owner, name="team", host="Registry.Example.com", values=LOGIN
    )
    row = RegistryCredential.objects.get(pk=credential.pk)
    assert row.host == "registry.example.com" and row.username == "robot$team"
    assert PASSWORD not in row.sealed and sealing.unseal(row.sealed) == {"password": PASSWORD}
    auth = registry_auth(tenant=tenant, host="registry.example.com")
    assert auth is not None and auth.password == PASSWORD and PASSWORD not in repr(auth)
    assert registry_auth(tenant=make_tenant(), host="registry.example.com") is None
    event = RegistryCredentialEvent.objects.get(tenant=tenant)
    assert (event.name, event.host, event.action, event.actor) == (
        "team",
        "registry.example.com",
        "created",
        owner,
    )


def test_api_never_returns_the_password_and_only_owners_change_credentials() -> None:
    tenant = make_tenant()
    owner, plain = member(tenant, "owner"), member(tenant, "member")
    url = f"/api/v1/tenants/{tenant.slug}/registries/"
    body = {"name": "team", "host": "registry.example.com", **LOGIN}
    refused = api(plain).post(url, body, format="json")
    assert refused.status_code == 403 and not RegistryCredential.objects.exists()
    created = api(owner).post(url, body, format="json")
    assert created.status_code == 201, created.json()
    assert PASSWORD not in created.content.decode() and "password" not in created.json()
    listed = api(plain).get(url)
    assert [r["host"] for r in listed.json()] == ["registry.example.com"]
    assert PASSWORD not in listed.content.decode()

    rotated = api(owner).put(f"{url}team/", {"username": "robot2", "password": "new-token"}, format="json")
    assert rotated.status_code == 200 and rotated.json()["rotated_by"] == owner.username
    assert "new-token" not in rotated.content.decode()
    auth = registry_auth(tenant=tenant, host="registry.example.com")
    assert auth is not None and (auth.username, auth.password) == ("robot2", "new-token")
    assert api(plain).put(f"{url}team/", LOGIN, format="json").status_code == 403

    other = make_tenant()
    assert api(member(other, "owner")).get(f"{url}team/").status_code == 404
    assert api(member(other, "owner")).delete(f"{url}team/").status_code == 404
    assert api(plain).delete(f"{url}team/").status_code == 403
    assert api(owner).delete(f"{url}team/").status_code == 204
    assert not RegistryCredential.objects.exists()
    events = api(plain).get(f"/api/v1/tenants/{tenant.slug}/registry-events/").json()
    assert [e["action"] for e in events] == ["deleted", "rotated", "created"]
    assert all(PASSWORD not in json.dumps(e) for e in events)


def test_bad_input_is_a_field_error_and_stores_nothing() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    url = f"/api/v1/tenants/{tenant.slug}/registries/"
    bad = {"name": "-x", "host": "https://registry.example.com/v2", "username": "a:b", "password": ""}
    answer = api(owner).post(url, bad, format="json")
    assert answer.status_code == 400
    fields = answer.json()["errors"]
    assert set(fields) == {"name", "host", "username", "password"}, fields
    assert "without a scheme or path" in fields["host"][0]
    assert not RegistryCredential.objects.exists() and not RegistryCredentialEvent.objects.exists()
    registry_credential_create(
        tenant=tenant, user=owner, name="team", host="registry.example.com", values=LOGIN
    )
    again = api(owner).post(url, {"name": "team", "host": "registry.example.com", **LOGIN}, format="json")
    assert set(again.json()["errors"]) == {"name", "host"}
    assert "rotate them" in again.json()["errors"]["host"][0]
    with pytest.raises(RegistryRefused) as caught:
        registry_credential_rotate(
            credential=RegistryCredential.objects.get(),
            user=owner,
            values={"username": "x", "password": "\x00"},
        )
    assert set(caught.value.errors) == {"password"} and "\x00" not in str(caught.value)


def test_the_host_must_be_one_the_tenant_policy_lets_images_come_from() -> None:
    tenant = allow(make_tenant(), image_registries=["registry.example.com/*", "python:*"])
    owner = member(tenant, "owner")
    with pytest.raises(RegistryRefused) as caught:
        registry_credential_create(tenant=tenant, user=owner, name="ghcr", host="ghcr.io", values=LOGIN)
    assert "does not let images come from ghcr.io" in caught.value.errors["host"][0]
    for host in ("registry.example.com", "index.docker.io"):
        registry_credential_create(
            tenant=tenant, user=owner, name=host.replace(".", "-"), host=host, values=LOGIN
        )
    hosts = sorted(RegistryCredential.objects.values_list("host", flat=True))
    assert hosts == ["docker.io", "registry.example.com"]  # Docker Hub by the name images give it
    with pytest.raises(RegistryRefused) as caught:
        registry_credential_create(tenant=tenant, user=owner, name="hub", host="docker.io", values=LOGIN)
    assert "already has credentials for docker.io" in caught.value.errors["host"][0]


def test_host_allowed_reads_registry_patterns() -> None:
    assert host_allowed("ghcr.io", [])
    assert host_allowed("registry.example.com", ["registry.example.com/*"])
    assert host_allowed("a.corp.example:5000", ["*.corp.example:5000/team/*"])
    assert not host_allowed("ghcr.io", ["registry.example.com/*"])
    assert host_allowed("docker.io", ["python:*"]) and not host_allowed("ghcr.io", ["python:*"])
    assert host_allowed("ghcr.io", ["*"])


def test_a_launch_builds_the_pull_secret_and_the_pods_name_it() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    registry_credential_create(
        tenant=tenant, user=owner, name="team", host="registry.example.com", values=LOGIN
    )
    job = job_submit(
        tenant=tenant, user=owner, document={**SPEC, "image": "registry.example.com/team/train:1"}
    )
    assert cluster.image_host(job) == "registry.example.com"
    pods = cluster.pods_spec(job)
    assert pods.image_pull_secret == names.pull_secret_name(job.pk, job.attempt)
    pod = to_dict(make_learner_pod(pods, 0))
    assert pod["spec"]["imagePullSecrets"] == [{"name": pods.image_pull_secret}]
    kubernetes_validate.validate(pod, "1.30", strict=True)

    login = cluster.job_registry_login(job)
    assert login == RegistryLogin("registry.example.com", "robot$team", PASSWORD)
    secret = to_dict(make_pull_secret("ns", pods.image_pull_secret, {"a": "b"}, login))
    kubernetes_validate.validate(secret, "1.30", strict=True)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(secret["stringData"][".dockerconfigjson"])
    entry = config["auths"]["registry.example.com"]
    assert base64.b64decode(entry["auth"]).decode() == f"robot$team:{PASSWORD}"

    public = job_submit(tenant=tenant, user=owner, document={**SPEC, "image": "python:3.11"})
    assert cluster.pods_spec(public).image_pull_secret is None and cluster.job_registry_login(public) is None
    assert "imagePullSecrets" not in to_dict(make_learner_pod(cluster.pods_spec(public), 0))["spec"]


def test_a_failed_pull_says_whether_the_tenant_has_credentials() -> None:
    tenant = make_tenant()
    assert "has no registry credentials for ghcr.io" in registry_hint(tenant=tenant, host="ghcr.io")
    registry_credential_create(
        tenant=tenant, user=member(tenant, "owner"), name="gh", host="ghcr.io", values=LOGIN
    )
    assert "used tenant" in registry_hint(tenant=tenant, host="GHCR.io")


def test_the_tenant_page_lists_hosts_and_lets_owners_change_them_without_showing_passwords() -> None:
    tenant = allow(make_tenant(), image_registries=["registry.example.com/*"])
    owner = member(tenant, "owner")
    page = Client()
    page.force_login(owner)
    form = {"name": "team", "host": "registry.example.com", **LOGIN}
    done = page.post(f"/tenants/{tenant.slug}/registries/", form)
    assert done.status_code == 302 and done["Location"].endswith("#registries")
    shown = page.get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'data-registry="team"' in shown and "registry.example.com" in shown and "robot$team" in shown
    assert PASSWORD not in shown and "Add credentials" in shown

    bad = page.post(f"/tenants/{tenant.slug}/registries/", {**form, "name": "ghcr", "host": "ghcr.io"})
    assert bad.status_code == 400
    body = bad.content.decode()
    assert "does not let images come from ghcr.io" in body and PASSWORD not in body
    assert RegistryCredential.objects.count() == 1

    rotated = page.post(
        f"/tenants/{tenant.slug}/registries/team/rotate/", {"username": "robot2", "password": "rotated-token"}
    )
    assert rotated.status_code == 302
    auth = registry_auth(tenant=tenant, host="registry.example.com")
    assert auth is not None and auth.password == "rotated-token"
    after = page.get(f"/tenants/{tenant.slug}/").content.decode()
    assert "rotated-token" not in after and f"by {owner.username}" in after

    viewer = Client()
    viewer.force_login(member(tenant, "member"))
    seen = viewer.get(f"/tenants/{tenant.slug}/").content.decode()
    assert 'data-registry="team"' in seen and "Add credentials" not in seen
    assert viewer.post(f"/tenants/{tenant.slug}/registries/team/delete/").status_code == 403
    outsider = Client()
    outsider.force_login(member(make_tenant(), "owner"))
    assert outsider.post(f"/tenants/{tenant.slug}/registries/team/delete/").status_code == 404
    assert page.post(f"/tenants/{tenant.slug}/registries/team/delete/").status_code == 302
    assert not RegistryCredential.objects.exists()
