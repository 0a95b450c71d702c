"""PersistentVolumeClaims as local folders (binding, lifetime, protection, GC) and configMap/secret volumes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, table_rows, wait_for, wait_phase

PROTECTION = "kubernetes.io/pvc-protection"


def _claim(
    name: str, size: str = "1Gi", owner_references: list[client.V1OwnerReference] | None = None
) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name, owner_references=owner_references),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name="standard",
            resources=client.V1VolumeResourceRequirements(requests={"storage": size}),
        ),
    )


def _claim_pod(name: str, claim: str, command: list[str], read_only: bool = False) -> client.V1Pod:
    pod = make_pod(name, command, volume_mounts=[client.V1VolumeMount(name="ckpt", mount_path="/ckpt")])
    pod.spec.volumes = [
        client.V1Volume(
            name="ckpt",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=claim, read_only=read_only
            ),
        )
    ]
    return pod


def _bound(core: client.CoreV1Api, ns: str, name: str) -> client.V1PersistentVolumeClaim:
    def check() -> client.V1PersistentVolumeClaim | None:
        claim = core.read_namespaced_persistent_volume_claim(name, ns)
        return claim if claim.status.phase == "Bound" else None

    return wait_for(check)


def _folder(sim: KubeSim, claim: client.V1PersistentVolumeClaim) -> Path:
    return sim.state_dir / "persistentvolumes" / claim.spec.volume_name


def _gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_persistent_volume_claim(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_claim_binds_to_a_local_folder_with_the_requested_capacity(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("data", "5Gi"))
    claim = _bound(core, ns, "data")
    assert claim.status.capacity == {"storage": "5Gi"} and claim.status.access_modes == ["ReadWriteOnce"]
    assert claim.spec.volume_name == f"pvc-{claim.metadata.uid}"
    assert PROTECTION in claim.metadata.finalizers
    assert _folder(sim, claim).is_dir()
    columns, rows = table_rows(api_client, f"{sim.url}/api/v1/namespaces/{ns}/persistentvolumeclaims")
    assert columns == ["Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "Age"]
    assert rows["data"][1:6] == ["Bound", claim.spec.volume_name, "5Gi", "RWO", "standard"]


def test_claim_without_access_modes_or_storage_request_is_invalid(core: client.CoreV1Api, ns: str) -> None:
    bad = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="bad"), spec=client.V1PersistentVolumeClaimSpec()
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_persistent_volume_claim(ns, bad)
    assert err.value.status == 422


def test_claim_data_outlives_pods_and_init_containers_write_into_it(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("ckpt"))
    writer = _claim_pod("writer", "ckpt", ["sh", "-c", "cat /ckpt/init && echo step-7 > /ckpt/last"])
    writer.spec.init_containers = [
        client.V1Container(
            name="prepare",
            image="x",
            command=["sh", "-c", "echo from-init > /ckpt/init"],
            volume_mounts=[client.V1VolumeMount(name="ckpt", mount_path="/ckpt")],
        )
    ]
    core.create_namespaced_pod(ns, writer)
    assert wait_phase(core, ns, "writer", ("Succeeded", "Failed")).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("writer", ns) == "from-init\n"
    core.delete_namespaced_pod("writer", ns)
    wait_for(lambda: not core.list_namespaced_pod(ns).items)
    core.create_namespaced_pod(ns, _claim_pod("reader", "ckpt", ["cat", "/ckpt/last"], read_only=True))
    wait_phase(core, ns, "reader", ("Succeeded",))
    assert core.read_namespaced_pod_log("reader", ns) == "step-7\n"


def test_pod_waits_for_a_missing_claim_and_starts_once_it_exists(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, _claim_pod("early", "late", ["ls", "/ckpt"]))

    def unschedulable() -> client.V1PodCondition | None:
        conditions = core.read_namespaced_pod("early", ns).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    condition = wait_for(unschedulable)
    assert (
        condition.reason == "Unschedulable" and 'persistentvolumeclaim "late" not found' in condition.message
    )
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=early").items
    assert any(e.reason == "FailedScheduling" and '"late" not found' in e.message for e in events)
    assert core.read_namespaced_pod("early", ns).status.phase == "Pending"
    core.create_namespaced_persistent_volume_claim(ns, _claim("late"))
    assert wait_phase(core, ns, "early", ("Succeeded", "Failed")).status.phase == "Succeeded"


def test_deleted_claim_stays_terminating_while_a_pod_uses_it(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_persistent_volume_claim(ns, _claim("busy"))
    folder = _folder(sim, _bound(core, ns, "busy"))
    core.create_namespaced_pod(ns, _claim_pod("user", "busy", ["sh", "-c", "touch /ckpt/x; sleep 60"]))
    wait_phase(core, ns, "user", ("Running",))
    wait_for(lambda: (folder / "x").exists())
    core.delete_namespaced_persistent_volume_claim("busy", ns)
    claim = core.read_namespaced_persistent_volume_claim("busy", ns)
    assert claim.metadata.deletion_timestamp is not None and claim.metadata.finalizers == [PROTECTION]
    _, rows = table_rows(api_client, f"{sim.url}/api/v1/namespaces/{ns}/persistentvolumeclaims")
    assert rows["busy"][1] == "Terminating"
    assert (folder / "x").exists()
    core.delete_namespaced_pod("user", ns, grace_period_seconds=0)
    wait_for(lambda: _gone(core, ns, "busy"))
    wait_for(lambda: not folder.exists())


def test_claim_owned_by_a_deleted_object_is_collected_with_its_folder(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    owner = core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=str(owner.metadata.uid)
    )
    core.create_namespaced_persistent_volume_claim(ns, _claim("owned", owner_references=[ref]))
    folder = _folder(sim, _bound(core, ns, "owned"))
    core.delete_namespaced_config_map("owner", ns)
    wait_for(lambda: _gone(core, ns, "owned"))
    wait_for(lambda: not folder.exists())


def test_namespace_deletion_removes_its_claims_and_their_folders(
    sim: KubeSim, core: client.CoreV1Api
) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_persistent_volume_claim(name, _claim("doomed"))
    folder = _folder(sim, _bound(core, name, "doomed"))
    core.create_namespaced_pod(name, _claim_pod("holder", "doomed", ["sleep", "60"]))
    wait_phase(core, name, "holder", ("Running",))
    core.delete_namespace(name)
    wait_for(lambda: name not in {n.metadata.name for n in core.list_namespace().items}, timeout=20)
    assert not folder.exists()


def test_config_map_and_secret_volumes_hold_their_keys_as_files(core: client.CoreV1Api, ns: str) -> None:
    pod = make_pod(
        "files",
        ["sh", "-c", "cat /etc/cfg/settings.yaml /etc/creds/token; ls /etc/cfg"],
        volume_mounts=[
            client.V1VolumeMount(name="cfg", mount_path="/etc/cfg"),
            client.V1VolumeMount(name="creds", mount_path="/etc/creds", read_only=True),
        ],
    )
    pod.spec.volumes = [
        client.V1Volume(
            name="cfg",
            config_map=client.V1ConfigMapVolumeSource(
                name="cfg", items=[client.V1KeyToPath(key="app", path="settings.yaml")]
            ),
        ),
        client.V1Volume(name="creds", secret=client.V1SecretVolumeSource(secret_name="creds")),
    ]
    core.create_namespaced_pod(ns, pod)

    def failed_mount() -> bool:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=files").items
        return any(e.reason == "FailedMount" for e in events)

    wait_for(failed_mount)
    assert core.read_namespaced_pod("files", ns).status.phase == "Pending"
    core.create_namespaced_config_map(
        ns,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"app": "lr: 1\n", "other": "x"}),
    )
    core.create_namespaced_secret(
        ns, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"token": "s3cr3t\n"})
    )
    wait_phase(core, ns, "files", ("Succeeded",))
    assert core.read_namespaced_pod_log("files", ns) == "lr: 1\ns3cr3t\nsettings.yaml\n"
