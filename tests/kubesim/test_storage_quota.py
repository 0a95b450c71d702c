"""ResourceQuota on PersistentVolumeClaims, as the apiserver's claim evaluator does it: claims count (and are
refused) by number and by requested storage, in all and per storage class; pods need not specify storage."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import error_body, make_pod, wait_for


def claim(name: str, size: str, storage_class: str | None = None) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name=storage_class,
            resources=client.V1VolumeResourceRequirements(requests={"storage": size}),
        ),
    )


def quota(core: client.CoreV1Api, ns: str, hard: dict[str, str]) -> None:
    body = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="storage"), spec=client.V1ResourceQuotaSpec(hard=hard)
    )
    core.create_namespaced_resource_quota(ns, body)


def refused(core: client.CoreV1Api, ns: str, body: client.V1PersistentVolumeClaim) -> str:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_persistent_volume_claim(ns, body)
    assert err.value.status == 403, err.value.body
    status = error_body(err.value)
    assert status["reason"] == "Forbidden" and status["details"]["kind"] == "persistentvolumeclaims"
    return str(status["message"])


def test_a_claim_over_the_requested_storage_quota_is_refused_with_the_apiservers_words(
    core: client.CoreV1Api, ns: str
) -> None:
    quota(core, ns, {"requests.storage": "25Gi", "persistentvolumeclaims": "10"})
    core.create_namespaced_persistent_volume_claim(ns, claim("a", "10Gi"))
    core.create_namespaced_persistent_volume_claim(ns, claim("b", "10Gi"))
    message = refused(core, ns, claim("c", "10Gi"))
    assert message == (
        'persistentvolumeclaims "c" is forbidden: exceeded quota: storage, requested: requests.storage=10Gi, '
        "used: requests.storage=20Gi, limited: requests.storage=25Gi"
    )
    core.create_namespaced_persistent_volume_claim(ns, claim("d", "5Gi"))
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("storage", ns).status.used or {})
            == {"requests.storage": "25Gi", "persistentvolumeclaims": "3"}
        )
    )


def test_a_claim_past_the_claim_count_is_refused(core: client.CoreV1Api, ns: str) -> None:
    quota(core, ns, {"persistentvolumeclaims": "2"})
    core.create_namespaced_persistent_volume_claim(ns, claim("a", "1Gi"))
    core.create_namespaced_persistent_volume_claim(ns, claim("b", "1Gi"))
    assert (
        "exceeded quota: storage, requested: persistentvolumeclaims=1, used: persistentvolumeclaims=2, "
        "limited: persistentvolumeclaims=2" in refused(core, ns, claim("c", "1Gi"))
    )
    core.delete_namespaced_persistent_volume_claim("a", ns)
    wait_for(lambda: len(core.list_namespaced_persistent_volume_claim(ns).items) == 1)
    core.create_namespaced_persistent_volume_claim(ns, claim("c", "1Gi"))


def test_per_class_storage_quota_counts_only_that_classs_claims(core: client.CoreV1Api, ns: str) -> None:
    quota(core, ns, {"kubesim-shared.storageclass.storage.k8s.io/requests.storage": "5Gi"})
    core.create_namespaced_persistent_volume_claim(ns, claim("big-default", "50Gi"))  # the default class
    core.create_namespaced_persistent_volume_claim(ns, claim("shared", "5Gi", "kubesim-shared"))
    assert "kubesim-shared.storageclass.storage.k8s.io/requests.storage=5Gi" in refused(
        core, ns, claim("more", "1Gi", "kubesim-shared")
    )


def test_pods_need_not_specify_storage_under_a_storage_quota(core: client.CoreV1Api, ns: str) -> None:
    quota(core, ns, {"requests.storage": "1Gi", "persistentvolumeclaims": "1", "requests.cpu": "1"})
    resources = client.V1ResourceRequirements(requests={"cpu": "100m"})
    core.create_namespaced_pod(ns, make_pod("p", ["true"], resources=resources))
