"""Network block disks (class ``kubesim-block``) are attached to one node at a time, as the attach-detach
controller keeps them: a pod on another node waits with a Multi-Attach error; the disk follows at once when
its last pod on a healthy node is gone, and only after ``maxWaitForUnmountDuration`` from a NotReady node."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, name_of, wait_for, wait_phase

_DEDICATED = client.V1Toleration(key="kubesim.test/dedicated", operator="Exists", effect="NoSchedule")
WAIT = 4.0


@pytest.fixture
def short_wait(sim: KubeSim) -> Iterator[None]:
    attacher = sim.cluster.attacher
    before, attacher.max_wait_for_unmount = attacher.max_wait_for_unmount, WAIT
    yield
    attacher.max_wait_for_unmount = before


def _claim(core: client.CoreV1Api, ns: str, name: str) -> str:
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name="kubesim-block",
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    core.create_namespaced_persistent_volume_claim(ns, claim)
    bound = wait_for(
        lambda: (c := core.read_namespaced_persistent_volume_claim(name, ns)).status.phase == "Bound" and c
    )
    return str(bound.spec.volume_name)


def _pod_on(node: str, name: str, claim: str, command: list[str]) -> client.V1Pod:
    pod = make_pod(name, command, volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")])
    pod.spec.volumes = [
        client.V1Volume(
            name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim)
        )
    ]
    pod.spec.node_selector = {"kubernetes.io/hostname": node}
    pod.spec.tolerations = [_DEDICATED]
    return pod


def _node(sim: KubeSim, name: str) -> None:
    sim.add_gpu_node(name, gpus=1, taints=[{"key": "kubesim.test/dedicated", "effect": "NoSchedule"}])


def _unreachable(core: client.CoreV1Api, node: str) -> bool:
    return any(t.key == "node.kubernetes.io/unreachable" for t in core.read_node(node).spec.taints or [])


def _multi_attach(core: client.CoreV1Api, ns: str, pod: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    return [e for e in events if e.reason == "FailedAttachVolume"]


def test_a_block_disk_held_by_a_running_pod_keeps_a_pod_on_another_node_waiting_then_follows_it(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    _node(sim, "attach-a")
    _node(sim, "attach-b")
    volume = _claim(core, ns, "disk")
    core.create_namespaced_pod(ns, _pod_on("attach-a", "holder", "disk", ["sleep", "60"]))
    wait_phase(core, ns, "holder", ("Running",))
    core.create_namespaced_pod(ns, _pod_on("attach-b", "mover", "disk", ["true"]))

    [event] = wait_for(lambda: _multi_attach(core, ns, "mover"))
    assert event.type == "Warning" and event.source.component == "attachdetach-controller"
    assert event.message == (
        f'Multi-Attach error for volume "{volume}" Volume is already exclusively attached to one node and '
        "can't be attached to another"
    )
    mover = core.read_namespaced_pod("mover", ns)
    assert mover.status.phase == "Pending" and not mover.status.container_statuses

    core.delete_namespaced_pod("holder", ns)  # a healthy node unmounts and the disk detaches at once
    wait_phase(core, ns, "mover", ("Succeeded",))
    sim.lose_node("attach-a")
    sim.lose_node("attach-b")


def test_a_block_disk_leaves_a_notready_node_only_after_the_wait_for_unmount(
    sim: KubeSim, core: client.CoreV1Api, ns: str, short_wait: None
) -> None:
    _node(sim, "stranded-a")
    _node(sim, "stranded-b")
    _claim(core, ns, "disk")
    core.create_namespaced_pod(ns, _pod_on("stranded-a", "holder", "disk", ["sleep", "60"]))
    wait_phase(core, ns, "holder", ("Running",))
    sim.set_node_ready("stranded-a", False)
    wait_for(lambda: _unreachable(core, "stranded-a"))
    core.delete_namespaced_pod("holder", ns, grace_period_seconds=0)
    wait_for(lambda: "holder" not in [name_of(p) for p in core.list_namespaced_pod(ns).items])
    gone = time.monotonic()
    core.create_namespaced_pod(ns, _pod_on("stranded-b", "mover", "disk", ["true"]))
    wait_for(lambda: _multi_attach(core, ns, "mover"))

    wait_phase(core, ns, "mover", ("Running", "Succeeded"), timeout=30)
    assert time.monotonic() - gone >= WAIT, "detached from the NotReady node before maxWaitForUnmountDuration"
    sim.set_node_ready("stranded-a", True)
    sim.lose_node("stranded-a")
    sim.lose_node("stranded-b")
