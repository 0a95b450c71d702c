"""Tenant policies: what admins may set (normalized, dangerous folders refused), who may read and change
them (API, admin console), and what they allow at submit (host folders, registries, S3 endpoints,
priorities), with a field error and nothing stored when they do not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from jobs.core.addresses import is_public_address
from jobs.core.policy import full_image_name
from jobs.models import Job
from jobs.services import JobRejected, job_submit
from tenants.admin import PolicyForm
from tenants.models import Policy, Tenant
from tenants.policy import policy_clean, policy_of, policy_set
from tests.factories import allow, make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# -- what may be set ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    ["/", "//proc", "/proc/1", "/var", "/var/lib/kubelet/pods", "/etc/ssl", "/run/containerd", "/usr"],
)
def test_folders_of_the_node_are_never_allowed(prefix: str) -> None:
    with pytest.raises(ValidationError) as caught:
        policy_clean({"host_path_prefixes": [prefix]})
    assert "host_path_prefixes" in caught.value.message_dict


def test_allowed_folders_are_normalized_and_kept_once() -> None:
    clean = policy_clean({"host_path_prefixes": ["//mnt/data/./sets/", "/mnt/data/sets", "/srv/models"]})
    assert clean["host_path_prefixes"] == ["/mnt/data/sets", "/srv/models"]
    with pytest.raises(ValidationError, match="must not contain"):
        policy_clean({"host_path_prefixes": ["/mnt/../etc"]})


def test_host_folders_need_the_privileged_pod_security_level() -> None:
    tenant = make_tenant()
    with pytest.raises(ValidationError) as caught:
        policy_set(tenant=tenant, host_path_prefixes=["/mnt/data"])
    assert "privileged" in caught.value.message_dict["pod_security"][0]
    assert not Policy.objects.filter(tenant=tenant).exists(), "nothing half stored"
    policy_set(tenant=tenant, host_path_prefixes=["/mnt/data"], pod_security="privileged")
    assert policy_of(tenant).host_path_prefixes == ["/mnt/data"]


def test_a_tenant_without_a_policy_row_has_the_defaults() -> None:
    policy = policy_of(make_tenant())
    assert policy.pk is None and policy.host_path_prefixes == [] and policy.image_registries == []
    assert (policy.member_max_priority, policy.owner_max_priority, policy.pod_security) == (
        0,
        100,
        "restricted",
    )


# -- who reads and changes it ---------------------------------------------------------------------------------


def test_members_read_their_tenants_policy_and_only_platform_admins_change_it() -> None:
    tenant = make_tenant(slug="vision")
    other = make_tenant(slug="nlp")
    owner = member(tenant, "owner")
    assert api(owner).get("/api/v1/tenants/vision/policy/").json()["pod_security"] == "restricted"
    assert api(owner).get("/api/v1/tenants/nlp/policy/").status_code == 404
    body = {"member_max_priority": 50}
    patch = api(owner).patch("/api/v1/tenants/vision/policy/", body, content_type="application/json")
    assert patch.status_code == 403
    admin = make_user(is_superuser=True, is_staff=True)
    patch = api(admin).patch("/api/v1/tenants/vision/policy/", body, content_type="application/json")
    assert patch.status_code == 200 and patch.json()["member_max_priority"] == 50
    assert policy_of(tenant).member_max_priority == 50 and not Policy.objects.filter(tenant=other).exists()


def test_a_bad_policy_is_refused_field_by_field_and_nothing_changes() -> None:
    tenant = make_tenant(slug="vision")
    admin = make_user(is_superuser=True, is_staff=True)
    body = {"host_path_prefixes": ["/var"], "member_max_priority": 500, "colour": "blue"}
    response = api(admin).patch("/api/v1/tenants/vision/policy/", body, content_type="application/json")
    assert response.status_code == 400 and set(response.json()["errors"]) == {"colour"}
    body.pop("colour")
    response = api(admin).patch("/api/v1/tenants/vision/policy/", body, content_type="application/json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"host_path_prefixes", "member_max_priority"}
    assert not Policy.objects.filter(tenant=tenant).exists()


def test_the_admin_console_form_shows_the_same_errors_beside_each_field() -> None:
    tenant = make_tenant()
    form = PolicyForm(
        data={
            "host_path_prefixes": '["/mnt/data"]',
            "image_registries": "[]",
            "datastore_hosts": "[]",
            "member_max_priority": "0",
            "owner_max_priority": "100",
            "pod_security": "restricted",
            "job_claims": "none",
        },
        instance=Policy(tenant=tenant),
    )
    assert not form.is_valid() and "privileged" in form.errors["pod_security"][0]
    form = PolicyForm(
        data={
            "host_path_prefixes": '["//mnt/data/"]',
            "image_registries": "[]",
            "datastore_hosts": "[]",
            "member_max_priority": "0",
            "owner_max_priority": "100",
            "pod_security": "privileged",
            "job_claims": "none",
        },
        instance=Policy(tenant=tenant),
    )
    assert form.is_valid(), form.errors
    assert form.save().host_path_prefixes == ["/mnt/data"]


# -- what it allows at submit ---------------------------------------------------------------------------------


def submit(tenant: Tenant, role: str = "member", **fields: Any) -> Job:
    document = {"name": "x", "image": "python:3.11", "command": ["python"], **fields}
    return job_submit(tenant=tenant, user=member(tenant, role), document=json.dumps(document))


def refused(tenant: Tenant, role: str = "member", **fields: Any) -> dict[str, list[str]]:
    before = Job.objects.count()
    with pytest.raises(JobRejected) as caught:
        submit(tenant, role, **fields)
    assert Job.objects.count() == before, "nothing half stored"
    return caught.value.errors


def host(path: str) -> dict[str, Any]:
    return {"name": "data", "kind": "data", "type": "host", "path": path, "mount_path": "/data"}


def test_host_folders_are_refused_unless_the_policy_allows_them() -> None:
    tenant = make_tenant(slug="vision")
    assert (
        "not allowed for tenant vision" in refused(tenant, volumes=[host("/mnt/data")])["volumes[0].path"][0]
    )
    assert "system path" in refused(tenant, volumes=[host("//proc")])["volumes[0].path"][0]
    allow(tenant, host_path_prefixes=["/mnt/data"], pod_security="privileged")
    assert "not under" in refused(tenant, volumes=[host("/mnt/database")])["volumes[0].path"][0]
    assert (
        submit(tenant, volumes=[host("/mnt/data/imagenet")]).spec["volumes"][0]["path"]
        == "/mnt/data/imagenet"
    )


def test_a_checkpoint_host_folder_needs_the_tenant_at_the_privileged_level(settings: Any) -> None:
    settings.CHECKPOINT_HOST_ROOT = "/srv/checkpoints"
    tenant = make_tenant(slug="vision")
    errors = refused(tenant)
    assert "CHECKPOINT_HOST_ROOT" in errors[""][0] and "enforces restricted" in errors[""][0]
    allow(tenant, pod_security="privileged")
    assert submit(tenant).pk


def test_images_must_come_from_an_allowed_registry() -> None:
    tenant = allow(make_tenant(), image_registries=["registry.example.com/*", "docker.io/library/python:*"])
    assert "not from a registry" in refused(tenant, image="ghcr.io/evil/miner:latest")["image"][0]
    assert submit(tenant, image="python:3.11").spec["image"] == "python:3.11"
    assert submit(tenant, image="registry.example.com/team/train:1").pk
    assert full_image_name("me/app") == "docker.io/me/app"
    assert full_image_name("localhost:5000/app") == "localhost:5000/app"


def s3(endpoint: str) -> dict[str, Any]:
    return {
        "name": "in",
        "kind": "data",
        "type": "s3",
        "bucket": "b",
        "endpoint": endpoint,
        "mount_path": "/in",
    }


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://169.254.169.254/latest",
        "http://127.0.0.1:6379",
        "http://10.0.0.5:9000",
        "https://kubernetes.default.svc",
        "http://minio:9000",
        "http://s3.default.svc.cluster.local",
        "http://metadata.google.internal",
    ],
)
def test_private_and_cluster_internal_s3_endpoints_are_refused_by_default(endpoint: str) -> None:
    errors = refused(make_tenant(), volumes=[s3(endpoint)])
    assert "only public S3 endpoints" in errors["volumes[0].endpoint"][0]


def test_public_endpoints_pass_and_a_listed_private_host_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    public = [(2, 1, 6, "", ("52.218.1.1", 0))]  # what getaddrinfo gives for the name, off the network
    monkeypatch.setattr("jobs.endpoints.socket.getaddrinfo", lambda host, *args, **kwargs: public)
    tenant = make_tenant()
    assert submit(tenant, volumes=[s3("https://s3.eu-west-1.amazonaws.com")]).pk
    assert is_public_address("8.8.8.8") and not is_public_address("100.64.0.1")
    allow(tenant, datastore_hosts=["minio.storage.svc", "*.corp.example"])
    assert submit(tenant, volumes=[s3("http://minio.storage.svc:9000")]).pk
    assert submit(tenant, volumes=[s3("https://s3.corp.example")]).pk
    errors = refused(tenant, volumes=[s3("https://s3.eu-west-1.amazonaws.com")])
    assert "not among the S3 hosts" in errors["volumes[0].endpoint"][0], "a list replaces 'any public'"


def test_ffdl_endpoint_errors_name_the_manifests_own_field() -> None:
    manifest = {
        "name": "m",
        "version": "1.0",
        "learners": 1,
        "data_stores": [
            {
                "id": "store",
                "type": "mount_cos",
                "training_data": {"container": "in"},
                "connection": {"auth_url": "http://169.254.169.254", "user_name": "u", "password": "p"},
            }
        ],
        "framework": {"name": "pytorch", "version": "2.3.0", "command": "python train.py"},
    }
    tenant = make_tenant()
    with pytest.raises(JobRejected) as caught:
        job_submit(tenant=tenant, user=member(tenant), document=json.dumps(manifest))
    assert list(caught.value.errors) == ["data_stores[0].connection.auth_url"]


def test_members_and_owners_have_their_own_priority_ceilings() -> None:
    tenant = make_tenant(slug="vision")
    assert "at most 0" in refused(tenant, priority=100)["priority"][0]
    assert submit(tenant, priority=0).priority == 0
    assert submit(tenant, "owner", priority=100).priority == 100
    allow(tenant, member_max_priority=20, owner_max_priority=50)
    assert submit(tenant, priority=20).priority == 20
    with pytest.raises(JobRejected) as caught:
        submit(tenant, "owner", priority=60)
    assert "at most 50" in caught.value.errors["priority"][0]


def test_admins_let_a_tenant_preempt_its_own_lower_priority_jobs() -> None:
    tenant = make_tenant(slug="vision")
    admin = make_user(is_superuser=True, is_staff=True)
    url = "/api/v1/tenants/vision/policy/"
    assert api(admin).get(url).json()["preempt_lower_priority"] is False
    bad = api(admin).patch(url, {"preempt_lower_priority": "yes"}, content_type="application/json")
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"preempt_lower_priority"}
    good = api(admin).patch(url, {"preempt_lower_priority": True}, content_type="application/json")
    assert good.status_code == 200 and good.json()["preempt_lower_priority"] is True
    assert policy_of(tenant).preempt_lower_priority is True


# -- operator overrides of the tenant's pods ------------------------------------------------------------------

POLICY_FORM = {
    "host_path_prefixes": "[]",
    "image_registries": "[]",
    "datastore_hosts": "[]",
    "member_max_priority": "0",
    "owner_max_priority": "100",
    "pod_security": "restricted",
    "job_claims": "none",
}


def test_the_admin_console_refuses_bad_pod_overrides_beside_the_field_and_saves_good_ones() -> None:
    tenant = make_tenant()
    bad = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "In"}], "patch": {"spec": {"hostPID": True}}}
    form = PolicyForm(data={**POLICY_FORM, "pod_overrides": json.dumps(bad)}, instance=Policy(tenant=tenant))
    assert not form.is_valid()
    assert form.errors["pod_overrides"] == [
        "tolerations[0].operator: must be Exists or Equal, got 'In'",
        "patch.spec.hostPID: cannot be overridden (a learner never shares the node's processes)",
    ]
    good = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {},
    }
    form = PolicyForm(data={**POLICY_FORM, "pod_overrides": json.dumps(good)}, instance=Policy(tenant=tenant))
    assert form.is_valid(), form.errors
    assert form.save().pod_overrides == {"tolerations": good["tolerations"]}
    form = PolicyForm(data={**POLICY_FORM, "pod_overrides": ""}, instance=policy_of(tenant))
    assert form.is_valid(), form.errors
    assert form.save().pod_overrides == {}


def test_the_admin_console_shows_the_pod_overrides_field_and_the_global_ones(settings: Any) -> None:
    settings.POD_OVERRIDES = {"annotations": {"example.com/note": "<b>eu</b>"}}
    tenant = make_tenant()
    policy_set(tenant=tenant, pod_overrides={"priority_class_name": "vision-high"})
    admin = make_user(is_superuser=True, is_staff=True)
    page = api(admin).get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    assert page.status_code == 200
    assert b"vision-high" in page.content and b"Operator overrides of the tenant" in page.content
    assert b"Global pod overrides (POD_OVERRIDES" in page.content
    assert b"&quot;example.com/note&quot;: &quot;&lt;b&gt;eu&lt;/b&gt;&quot;" in page.content


def test_policy_set_refuses_bad_overrides_and_stores_nothing() -> None:
    tenant = make_tenant()
    with pytest.raises(ValidationError) as caught:
        policy_set(tenant=tenant, pod_overrides={"patch": {"spec": {"serviceAccountName": "admin"}}})
    assert "serviceAccountName: cannot be overridden" in caught.value.message_dict["pod_overrides"][0]
    assert not Policy.objects.filter(tenant=tenant).exists()


def test_platform_admins_set_pod_overrides_through_the_api_with_field_errors() -> None:
    tenant = make_tenant()
    admin = make_user(is_superuser=True, is_staff=True)
    url = f"/api/v1/tenants/{tenant.slug}/policy/"
    body = json.dumps(
        {"pod_overrides": {"node_selector": {"example.com/pool": "vision"}, "patch": {"kind": "Pod"}}}
    )
    response = api(admin).patch(url, body, content_type="application/json")
    assert response.status_code == 400
    assert "patch.kind: unknown field (a patch holds `spec`)" in response.json()["errors"]["pod_overrides"]
    body = json.dumps({"pod_overrides": {"node_selector": {"example.com/pool": "vision"}}})
    response = api(admin).patch(url, body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["pod_overrides"] == {"node_selector": {"example.com/pool": "vision"}}
    owner = member(tenant, "owner")
    response = api(owner).patch(url, body, content_type="application/json")
    assert response.status_code == 403


def test_the_admin_console_page_refuses_a_privileged_patch_beside_the_field_and_saves_a_toleration() -> None:
    from django.urls import reverse

    from tests.tenants.test_quota_borrowing import _change_form

    tenant = make_tenant(slug="vision", gpus=4)
    client = api(make_user(is_superuser=True, is_staff=True))
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])

    def post(overrides: dict[str, Any]) -> Any:
        form = _change_form(tenant.pk) | {"policy-TOTAL_FORMS": "1", "policy-0-tenant": str(tenant.pk)}
        form |= {f"policy-0-{name}": value for name, value in POLICY_FORM.items()}
        return client.post(url, form | {"policy-0-pod_overrides": json.dumps(overrides)})

    privileged = {
        "patch": {"spec": {"containers": [{"name": "learner", "securityContext": {"privileged": True}}]}}
    }
    response = post(privileged)
    assert response.status_code == 200
    assert "patch.spec.containers[0].securityContext: cannot be overridden" in response.content.decode()
    assert not Policy.objects.filter(tenant=tenant).exists()
    toleration = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert post(toleration).status_code == 302
    assert policy_of(tenant).pod_overrides == toleration
