"""A tenant namespace that exists without this installation's labels is neither adopted nor changed: no
labels patched, no quota, LimitRange or NetworkPolicy added (the NetworkPolicy would select every pod of
its owner). Labelled on purpose, it becomes the tenant's; one made by the platform before namespaces
carried the installation label stays its own. Against kubesim through the official client."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from clusterio import names
from clusterio.client import Cluster
from clusterio.errors import NamespaceNotOwned
from kubesim.testing import KubeSim
from tests.clusterio.conftest import BIG_LIMITS, TENANT


@pytest.fixture
def mine(sim: KubeSim) -> Iterator[Cluster]:
    """A client of one installation, as the platform makes it."""
    cluster = Cluster(kubeconfig=str(sim.kubeconfig_path), retries=1, backoff=0.01, installation="prod-a")
    yield cluster
    cluster.close()


@pytest.fixture
def existing(core: client.CoreV1Api) -> Iterator[str]:
    """The name of a namespace the test creates itself (deleted afterwards)."""
    name = f"ty-{uuid.uuid4().hex[:8]}"
    yield name
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)


def fences(core: client.CoreV1Api, namespace: str) -> list[str]:
    """The kinds of fence objects in a namespace."""
    networking = client.NetworkingV1Api(core.api_client)
    found = []
    if core.list_namespaced_resource_quota(namespace).items:
        found.append("ResourceQuota")
    if core.list_namespaced_limit_range(namespace).items:
        found.append("LimitRange")
    if networking.list_namespaced_network_policy(namespace).items:
        found.append("NetworkPolicy")
    return found


def create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str]) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))


@pytest.mark.parametrize(
    "labels",
    [
        {"team": "search"},  # another team's
        {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_INSTALLATION: "staging"},
    ],
    ids=["another-team", "another-installation"],
)
def test_a_namespace_of_someone_else_is_neither_adopted_nor_changed(
    mine: Cluster, core: client.CoreV1Api, existing: str, labels: dict[str, str]
) -> None:
    create_namespace(core, existing, labels)
    before = core.read_namespace(existing).metadata

    with pytest.raises(NamespaceNotOwned) as refused:
        mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)

    assert str(refused.value) == f"namespace {existing} exists and is not managed by this installation"
    after = core.read_namespace(existing).metadata
    assert (after.labels, after.resource_version) == (before.labels, before.resource_version)
    assert fences(core, existing) == []
    assert not mine.namespace_owned(namespace=existing, tenant_slug=TENANT)


def test_a_namespace_labelled_on_purpose_becomes_the_tenants(
    mine: Cluster, core: client.CoreV1Api, existing: str
) -> None:
    create_namespace(core, existing, {"team": "search"})
    with pytest.raises(NamespaceNotOwned) as refused:
        mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)
    assert refused.value.labels == {
        names.LABEL_TENANT: TENANT,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTALLATION: "prod-a",
    }

    core.patch_namespace(existing, {"metadata": {"labels": refused.value.labels}})
    assert mine.namespace_owned(namespace=existing, tenant_slug=TENANT)
    mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)

    assert fences(core, existing) == ["ResourceQuota", "LimitRange", "NetworkPolicy"]
    assert core.read_namespace(existing).metadata.labels["team"] == "search"


def test_a_namespace_the_platform_made_before_the_installation_label_gets_it(
    mine: Cluster, core: client.CoreV1Api, existing: str
) -> None:
    create_namespace(core, existing, names.tenant_labels(TENANT))
    mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)
    assert core.read_namespace(existing).metadata.labels[names.LABEL_INSTALLATION] == "prod-a"

    other_tenant = f"ty-{uuid.uuid4().hex[:8]}"
    create_namespace(core, other_tenant, names.tenant_labels("someone-else"))
    try:
        with pytest.raises(NamespaceNotOwned):
            mine.ensure_tenant(namespace=other_tenant, tenant_slug=TENANT, limits=BIG_LIMITS)
    finally:
        core.delete_namespace(other_tenant)


def test_a_namespace_the_platform_creates_carries_the_installation_label(
    mine: Cluster, core: client.CoreV1Api, existing: str
) -> None:
    assert mine.namespace_owned(namespace=existing, tenant_slug=TENANT)
    mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)
    labels = core.read_namespace(existing).metadata.labels
    assert labels[names.LABEL_INSTALLATION] == "prod-a" and labels[names.LABEL_TENANT] == TENANT
    mine.ensure_tenant(namespace=existing, tenant_slug=TENANT, limits=BIG_LIMITS)
