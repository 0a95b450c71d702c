"""Running inside the cluster: the pod's service-account credentials, and tenant namespaces named and
labelled as the operator configured (TENANT_NAMESPACE_PREFIX, TENANT_NAMESPACE_LABELS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.config import incluster_config

from clusterio import names
from clusterio.builders import TenantLimits
from clusterio.client import Cluster
from clusterio.errors import Unavailable
from jobs import cluster as jobs_cluster
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import SPEC, make_tenant, member


@pytest.fixture
def service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """What the kubelet gives a pod: the API's address in the environment, a token and CA in files."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("pod-service-account-token")
    ca.write_text(
        "-----BEGIN CERTIFICATE-----\nnot checked until a request is made\n-----END CERTIFICATE-----\n"
    )
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return str(ca)


def test_without_a_kubeconfig_the_client_uses_the_pods_service_account(service_account: str) -> None:
    client = Cluster()
    configuration = client.api_client.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.ssl_ca_cert == service_account
    assert configuration.auth_settings()["BearerToken"]["value"].lower() == "bearer pod-service-account-token"
    client.close()


def test_the_platform_picks_in_cluster_credentials_when_kubeconfig_is_empty(
    service_account: str, settings: Any
) -> None:
    settings.KUBECONFIG, settings.KUBE_CONTEXT = "", ""
    settings.INSTALLATION_ID = (
        "in-cluster-test"  # else derived from the database, which this test does not use
    )
    client = jobs_cluster.cluster()
    assert client.api_client.configuration.host == "https://10.96.0.1:443"


def test_outside_a_pod_without_a_kubeconfig_the_error_says_what_was_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(Unavailable, match="in-cluster service account"):
        Cluster()


def test_tenant_namespaces_carry_the_configured_labels(kubesim_cluster: KubeSim) -> None:
    client = Cluster(kubeconfig=str(kubesim_cluster.kubeconfig_path))
    namespace = names.tenant_namespace("opslabels", "vision")
    extra = {"example.com/cost-center": "ml-42", names.LABEL_TENANT: "not-this-one"}
    limits = TenantLimits(gpus=1, cpu_millis=4000, memory_mib=8192)
    client.ensure_tenant(namespace=namespace, tenant_slug="vision", limits=limits, labels=extra)
    labels = client.core.read_namespace(namespace).metadata.labels
    assert labels["example.com/cost-center"] == "ml-42"
    assert labels[names.LABEL_TENANT] == "vision", "the platform's own labels win"
    # Changed later: an existing namespace is brought up to date.
    client.ensure_tenant(
        namespace=namespace, tenant_slug="vision", limits=limits, labels={"team": "research"}
    )
    assert client.core.read_namespace(namespace).metadata.labels["team"] == "research"
    client.close()


@pytest.mark.django_db
def test_a_launch_names_and_labels_the_namespace_from_settings(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.TENANT_NAMESPACE_PREFIX = "acme"
    settings.TENANT_NAMESPACE_LABELS = {"example.com/owner": "platform"}
    calls: dict[str, Any] = {}

    class Recorder:
        def ensure_tenant(self, **kwargs: Any) -> None:
            calls["tenant"] = kwargs

        def launch(self, **kwargs: Any) -> list[str]:
            calls["launch"] = kwargs
            return []

    monkeypatch.setattr(jobs_cluster, "cluster", Recorder)
    tenant = make_tenant(slug="vision")
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    jobs_cluster.launch(job)
    assert calls["tenant"]["namespace"] == "acme-vision"
    assert calls["tenant"]["labels"] == {"example.com/owner": "platform"}
    assert calls["launch"]["spec"].namespace == "acme-vision"


def test_the_default_and_configured_prefix_give_one_dash() -> None:
    """The prefix is given without its dash (the name builder adds one): `ty-vision`, never `ty--vision`."""
    from django.conf import settings

    from tests.deploy.test_manifests import find

    assert not settings.TENANT_NAMESPACE_PREFIX.endswith("-")
    configured = find("ConfigMap", "trainyard-config")["data"]["TENANT_NAMESPACE_PREFIX"]
    assert names.tenant_namespace(configured, "vision") == f"{configured}-vision"
