"""The kubelet removes a deleted pod's folder (its logs and emptyDir volumes), as a real kubelet's container
GC and housekeeping do; a pod that is still stored, finished or not, keeps its logs."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.housekeeping import PodDirCollector
from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

# Writes a megabyte of log and a file into its emptyDir, leaves a folder nobody may enter, then waits.
WRITER = (
    "import os, sys, time\n"
    "for i in range(1024): print('x' * 1023, flush=True)\n"
    "open('/scratch/data.bin', 'wb').write(b'y' * 65536)\n"
    "os.makedirs('/scratch/locked/inner'); os.chmod('/scratch/locked', 0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def pod_folder(sim: KubeSim, pod: client.V1Pod) -> Path:
    meta = pod.metadata
    return sim.state_dir / "pods" / f"{meta.namespace}_{meta.name}_{meta.uid[:8]}"


def collector(sim: KubeSim) -> PodDirCollector:
    return next(c for c in sim.cluster.controllers if isinstance(c, PodDirCollector))


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_a_deleted_running_pods_logs_and_volumes_are_removed_once_it_is_gone(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    pod = make_pod(
        "writer",
        ["python", "-c", WRITER],
        volume_mounts=[client.V1VolumeMount(name="scratch", mount_path="/scratch")],
    )
    pod.spec.volumes = [client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource())]
    created = core.create_namespaced_pod(ns, pod)
    keeper = core.create_namespaced_pod(ns, make_pod("keeper", ["sleep", "600"]))
    wait_phase(core, ns, "writer", ("Running",))
    wait_for(lambda: "ready" in core.read_namespaced_pod_log("writer", ns, tail_lines=1), timeout=30)
    folder = pod_folder(sim, created)
    logs = list((folder / "logs").glob("*.log"))
    assert logs and sum(p.stat().st_size for p in logs) > 1_000_000, "the log is on the node"

    core.delete_namespaced_pod("writer", ns)
    wait_for(lambda: gone(core, ns, "writer"), timeout=30)
    wait_for(lambda: not folder.exists(), timeout=15)
    collector(sim).collect()
    assert pod_folder(sim, keeper).exists(), "a pod that is still there keeps its folder"
    assert core.read_namespaced_pod("keeper", ns).status.phase in ("Pending", "Running")


def test_a_finished_pod_keeps_its_log_until_it_is_deleted(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    created = core.create_namespaced_pod(ns, make_pod("done", ["python", "-c", "print('finished')"]))
    wait_phase(core, ns, "done", ("Succeeded",))
    folder = pod_folder(sim, created)
    assert folder not in collector(sim).collect(), "one housekeeping pass leaves a stored pod alone"
    assert folder.exists() and core.read_namespaced_pod_log("done", ns) == "finished\n"

    core.delete_namespaced_pod("done", ns)
    wait_for(lambda: gone(core, ns, "done"), timeout=15)
    wait_for(lambda: not folder.exists(), timeout=15)
