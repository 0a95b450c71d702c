"""StorageClasses: the default class, access modes each provisioner offers, and claims that stay Pending."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import authorized, error_body, make_pod, table_rows, wait_for, wait_phase

DEFAULT = "storageclass.kubernetes.io/is-default-class"
MODES = "kubesim.io/access-modes"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def storage(api_client: client.ApiClient) -> client.StorageV1Api:
    return client.StorageV1Api(api_client)


@pytest.fixture
def class_name(storage: client.StorageV1Api) -> Iterator[str]:
    """A unique name for a StorageClass the test creates; the class is deleted afterwards."""
    name = f"sc-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        storage.delete_storage_class(name)
    except ApiException as exc:
        assert exc.status == 404


def _claim(name: str, modes: list[str], storage_class: str | None = None) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=modes,
            storage_class_name=storage_class,
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )


def _storage_class(
    name: str, provisioner: str, annotations: dict[str, str] | None = None
) -> client.V1StorageClass:
    return client.V1StorageClass(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations), provisioner=provisioner
    )


def _phase(core: client.CoreV1Api, ns: str, name: str) -> str:
    return str(core.read_namespaced_persistent_volume_claim(name, ns).status.phase)


def _event(core: client.CoreV1Api, ns: str, name: str, reason: str) -> client.CoreV1Event:
    """Wait for the Event with ``reason`` about the object ``name``."""

    def find() -> client.CoreV1Event | None:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return next((e for e in events if e.reason == reason), None)

    return wait_for(find)


def _claim_pod(name: str, claim: str, command: list[str]) -> client.V1Pod:
    pod = make_pod(name, command, volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")])
    pod.spec.volumes = [
        client.V1Volume(
            name="data",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim),
        )
    ]
    return pod


def test_cluster_starts_with_a_default_local_class_and_a_shared_class(
    api_client: client.ApiClient, sim: KubeSim, storage: client.StorageV1Api
) -> None:
    classes = {c.metadata.name: c for c in storage.list_storage_class().items}
    standard, shared = classes["standard"], classes["kubesim-shared"]
    assert standard.metadata.annotations[DEFAULT] == "true" and DEFAULT not in shared.metadata.annotations
    assert (standard.provisioner, shared.provisioner) == ("kubesim.io/local-path", "kubesim.io/shared")
    assert standard.metadata.annotations[MODES] == "ReadWriteOnce,ReadWriteOncePod"
    assert shared.metadata.annotations[MODES] == "ReadWriteOnce,ReadOnlyMany,ReadWriteMany"
    for storage_class in (standard, shared):
        assert (storage_class.reclaim_policy, storage_class.volume_binding_mode) == ("Delete", "Immediate")
    columns, rows = table_rows(api_client, f"{sim.url}/apis/storage.k8s.io/v1/storageclasses")
    assert columns == [
        "Name",
        "Provisioner",
        "ReclaimPolicy",
        "VolumeBindingMode",
        "AllowVolumeExpansion",
        "Age",
    ]
    assert rows["standard (default)"][1:5] == ["kubesim.io/local-path", "Delete", "Immediate", False]
    assert rows["kubesim-shared"][1:5] == ["kubesim.io/shared", "Delete", "Immediate", False]


def test_claim_without_a_class_gets_the_default_and_binds(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("plain", ["ReadWriteOnce"]))
    claim = core.read_namespaced_persistent_volume_claim("plain", ns)
    assert claim.spec.storage_class_name == "standard"
    wait_for(lambda: _phase(core, ns, "plain") == "Bound")
    claim = core.read_namespaced_persistent_volume_claim("plain", ns)
    annotations = claim.metadata.annotations
    assert annotations["volume.kubernetes.io/storage-provisioner"] == "kubesim.io/local-path"
    assert (
        _event(core, ns, "plain", "ProvisioningSucceeded").source.component == "kubesim.io/local-path_kubesim"
    )


def test_read_write_many_claim_on_the_default_class_stays_pending_and_so_do_its_pods(
    core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("rwx", ["ReadWriteMany"]))
    core.create_namespaced_pod(ns, _claim_pod("user", "rwx", ["true"]))
    event = _event(core, ns, "rwx", "ProvisioningFailed")
    assert event.type == "Warning" and event.message == (
        'failed to provision volume with StorageClass "standard": '
        "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes"
    )
    scheduling = _event(core, ns, "user", "FailedScheduling")
    assert "pod has unbound immediate PersistentVolumeClaims" in scheduling.message
    claim = core.read_namespaced_persistent_volume_claim("rwx", ns)
    assert claim.status.phase == "Pending" and claim.spec.volume_name is None
    pod = core.read_namespaced_pod("user", ns)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None


def test_shared_class_serves_read_write_many_to_several_pods(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("shared", ["ReadWriteMany"], "kubesim-shared"))
    wait_for(lambda: _phase(core, ns, "shared") == "Bound")
    assert core.read_namespaced_persistent_volume_claim("shared", ns).status.access_modes == ["ReadWriteMany"]
    core.create_namespaced_pod(ns, _claim_pod("writer", "shared", ["sh", "-c", "echo hi > /data/f"]))
    wait_phase(core, ns, "writer", ("Succeeded",))
    core.create_namespaced_pod(ns, _claim_pod("reader", "shared", ["cat", "/data/f"]))
    wait_phase(core, ns, "reader", ("Succeeded",))
    assert core.read_namespaced_pod_log("reader", ns) == "hi\n"


def test_claim_naming_a_missing_class_binds_once_the_class_is_created(
    storage: client.StorageV1Api, core: client.CoreV1Api, ns: str, class_name: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("later", ["ReadWriteMany"], class_name))
    event = _event(core, ns, "later", "ProvisioningFailed")
    assert (
        event.type == "Warning" and event.message == f'storageclass.storage.k8s.io "{class_name}" not found'
    )
    assert event.source.component == "persistentvolume-controller"
    assert _phase(core, ns, "later") == "Pending"
    storage.create_storage_class(_storage_class(class_name, "kubesim.io/shared"))
    wait_for(lambda: _phase(core, ns, "later") == "Bound")


def test_class_annotation_narrows_the_modes_a_provisioner_offers(
    storage: client.StorageV1Api, core: client.CoreV1Api, ns: str, class_name: str
) -> None:
    storage.create_storage_class(_storage_class(class_name, "kubesim.io/shared", {MODES: "ReadWriteOnce"}))
    core.create_namespaced_persistent_volume_claim(ns, _claim("one", ["ReadWriteOnce"], class_name))
    core.create_namespaced_persistent_volume_claim(ns, _claim("many", ["ReadWriteMany"], class_name))
    wait_for(lambda: _phase(core, ns, "one") == "Bound")
    message = _event(core, ns, "many", "ProvisioningFailed").message
    assert message.startswith(f'failed to provision volume with StorageClass "{class_name}": ')
    assert "ReadWriteMany" in message and _phase(core, ns, "many") == "Pending"


def test_claims_no_kubesim_provisioner_serves_stay_pending(
    storage: client.StorageV1Api, core: client.CoreV1Api, ns: str, class_name: str
) -> None:
    storage.create_storage_class(_storage_class(class_name, "ebs.csi.aws.com"))
    core.create_namespaced_persistent_volume_claim(ns, _claim("external", ["ReadWriteOnce"], class_name))
    core.create_namespaced_persistent_volume_claim(ns, _claim("static", ["ReadWriteOnce"], ""))
    waiting = _event(core, ns, "external", "ExternalProvisioning")
    assert "external provisioner 'ebs.csi.aws.com'" in waiting.message and waiting.type == "Normal"
    unbound = _event(core, ns, "static", "FailedBinding")
    assert unbound.message == "no persistent volumes available for this claim and no storage class is set"
    static = core.read_namespaced_persistent_volume_claim("static", ns)
    assert static.spec.storage_class_name == "" and static.status.phase == "Pending"
    assert _phase(core, ns, "external") == "Pending"


def test_storage_class_validation_and_immutable_fields(
    api_client: client.ApiClient,
    sim: KubeSim,
    storage: client.StorageV1Api,
    core: client.CoreV1Api,
    ns: str,
    class_name: str,
) -> None:
    # The client's model cannot be built without a provisioner: send the bare body.
    response = api_client.call_api(
        "POST",
        f"{sim.url}/apis/storage.k8s.io/v1/storageclasses",
        header_params=authorized(api_client, **{"Content-Type": "application/json"}),
        body={"metadata": {"name": class_name}},
    )
    assert response.status == 422
    assert json.loads(bytes(response.read()))["details"]["causes"][0]["field"] == "provisioner"
    storage.create_storage_class(_storage_class(class_name, "kubesim.io/local-path"))
    with pytest.raises(ApiException) as err:
        storage.patch_storage_class(class_name, {"provisioner": "kubesim.io/shared"}, _content_type=MERGE)
    assert err.value.status == 422
    assert "updates to provisioner are forbidden" in error_body(err.value)["message"]
    storage.patch_storage_class(class_name, {"allowVolumeExpansion": True}, _content_type=MERGE)
    assert storage.read_storage_class(class_name).allow_volume_expansion is True
    with pytest.raises(ApiException) as err:
        core.create_namespaced_persistent_volume_claim(
            ns, _claim("bad", ["ReadWriteOncePod", "ReadWriteOnce"])
        )
    assert (
        err.value.status == 422
        and "ReadWriteOncePod with other access modes" in error_body(err.value)["message"]
    )


def test_default_class_created_later_is_given_to_waiting_claims(tmp_path: Path) -> None:
    with running_kubesim(tmp_path) as sim:
        api = sim.api_client()
        core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
        storage.delete_storage_class("standard")
        core.create_namespaced_persistent_volume_claim("default", _claim("early", ["ReadWriteOnce"]))
        claim = core.read_namespaced_persistent_volume_claim("early", "default")
        assert claim.spec.storage_class_name is None
        assert "no storage class is set" in _event(core, "default", "early", "FailedBinding").message
        storage.create_storage_class(_storage_class("fresh", "kubesim.io/local-path", {DEFAULT: "true"}))
        wait_for(lambda: _phase(core, "default", "early") == "Bound")
        assert (
            core.read_namespaced_persistent_volume_claim("early", "default").spec.storage_class_name
            == "fresh"
        )


def test_claim_spec_is_immutable_but_a_bound_claims_requests_and_labels_are_not(
    core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("stuck", ["ReadWriteMany"]))
    _event(core, ns, "stuck", "ProvisioningFailed")
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_persistent_volume_claim(
            "stuck", ns, {"spec": {"storageClassName": "kubesim-shared"}}, _content_type=MERGE
        )
    assert err.value.status == 422
    assert "spec is immutable after creation" in error_body(err.value)["message"]
    core.create_namespaced_persistent_volume_claim(ns, _claim("grown", ["ReadWriteOnce"]))
    wait_for(lambda: _phase(core, ns, "grown") == "Bound")
    patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    claim = core.patch_namespaced_persistent_volume_claim("grown", ns, patch, _content_type=MERGE)
    assert claim.metadata.labels == {"a": "b"} and claim.status.capacity == {"storage": "1Gi"}  # not resized


def test_wait_for_first_consumer_class_provisions_once_a_pod_is_scheduled(
    storage: client.StorageV1Api, core: client.CoreV1Api, ns: str, class_name: str
) -> None:
    body = _storage_class(class_name, "kubesim.io/local-path")
    body.volume_binding_mode = "WaitForFirstConsumer"
    storage.create_storage_class(body)
    core.create_namespaced_persistent_volume_claim(ns, _claim("lazy", ["ReadWriteOnce"], class_name))
    core.create_namespaced_persistent_volume_claim(ns, _claim("lazy-rwx", ["ReadWriteMany"], class_name))
    for name in ("lazy", "lazy-rwx"):
        waiting = _event(core, ns, name, "WaitForFirstConsumer")
        assert waiting.message == "waiting for first consumer to be created before binding"
        assert _phase(core, ns, name) == "Pending"
    # Without a consumer even an impossible mode is not tried yet.
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=lazy-rwx").items
    assert not [e for e in events if e.reason == "ProvisioningFailed"]

    core.create_namespaced_pod(ns, _claim_pod("consumer", "lazy", ["sh", "-c", "echo ok > /data/f"]))
    pod = wait_phase(core, ns, "consumer", ("Succeeded",))
    claim = core.read_namespaced_persistent_volume_claim("lazy", ns)
    assert claim.status.phase == "Bound"
    assert claim.metadata.annotations["volume.kubernetes.io/selected-node"] == pod.spec.node_name

    # The scheduler waits for the claim (no FailedScheduling), the provisioner refuses it for that node.
    core.create_namespaced_pod(ns, _claim_pod("stranded", "lazy-rwx", ["true"]))
    assert "NodePath only supports" in _event(core, ns, "lazy-rwx", "ProvisioningFailed").message
    claim = core.read_namespaced_persistent_volume_claim("lazy-rwx", ns)
    assert "volume.kubernetes.io/selected-node" in claim.metadata.annotations
    pod = core.read_namespaced_pod("stranded", ns)
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=stranded").items
    assert not [e for e in events if e.reason == "FailedScheduling"]

    # A pod bound by hand is its claim's consumer too: the PV controller selects that pod's node.
    core.create_namespaced_persistent_volume_claim(ns, _claim("by-hand", ["ReadWriteOnce"], class_name))
    direct = _claim_pod("direct", "by-hand", ["true"])
    direct.spec.node_name = "kubesim-node"
    core.create_namespaced_pod(ns, direct)
    wait_phase(core, ns, "direct", ("Succeeded",))
    claim = core.read_namespaced_persistent_volume_claim("by-hand", ns)
    assert claim.metadata.annotations["volume.kubernetes.io/selected-node"] == "kubesim-node"
