"""kubectl against kubesim (skipped when no working kubectl is installed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, wait_phase


def _kubectl_works() -> bool:
    path = shutil.which("kubectl")
    if not path:
        return False
    try:
        result = subprocess.run([path, "version", "--client"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


pytestmark = pytest.mark.skipif(not _kubectl_works(), reason="no working kubectl")


def _kubectl(sim: KubeSim, *args: str) -> str:
    env = dict(os.environ, KUBECONFIG=str(sim.kubeconfig_path))
    result = subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kubectl_apply_get_logs_delete(sim: KubeSim, core: client.CoreV1Api, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kc\n"
        "spec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox\n"
        "    command: [python, -c, 'print(42)']\n"
    )
    assert "created" in _kubectl(sim, "apply", "-n", ns, "-f", str(manifest))
    wait_phase(core, ns, "kc", ("Succeeded",))
    listing = _kubectl(sim, "get", "nodes,pods", "-A")
    assert "kubesim-node" in listing and "kc" in listing
    assert _kubectl(sim, "logs", "-n", ns, "kc") == "42\n"
    assert "deleted" in _kubectl(sim, "delete", "-n", ns, "pod", "kc")


def _header_and_rows(text: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = [line.split() for line in text.strip().splitlines()]
    return lines[0], {cells[0]: cells for cells in lines[1:]}


def test_kubectl_get_prints_table_columns_and_describe_works(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, make_pod("table-pod", ["python", "-c", "print('hi')"]))
    wait_phase(core, ns, "table-pod", ("Succeeded",))
    header, rows = _header_and_rows(_kubectl(sim, "get", "pods", "-n", ns))
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows["table-pod"][1:4] == ["0/1", "Completed", "0"]
    header, rows = _header_and_rows(_kubectl(sim, "get", "nodes"))
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert rows["kubesim-node"][1:3] == ["Ready", "<none>"] and rows["kubesim-node"][4] == "v1.32.0-kubesim"
    header, rows = _header_and_rows(_kubectl(sim, "get", "pods", "-A", "-o", "wide"))
    assert header == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    pod = core.read_namespaced_pod("table-pod", ns)
    assert rows[ns][1] == "table-pod" and rows[ns][6:] == [pod.status.pod_ip, pod.spec.node_name]
    header, rows = _header_and_rows(_kubectl(sim, "get", "serviceaccounts", "-n", ns))
    assert header == ["NAME", "AGE"] and "default" in rows
    described = _kubectl(sim, "describe", "pod", "-n", ns, "table-pod")
    for field, value in (
        ("Name", "table-pod"),
        ("Namespace", ns),
        ("Status", "Succeeded"),
        ("Node", "kubesim-"),
    ):
        assert re.search(rf"^{field}:\s+{value}", described, re.MULTILINE), described
    assert "kubesim ignores container images" in described


def test_kubectl_get_pvc_and_init_pod_status(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_persistent_volume_claim(
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="ckpt"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "2Gi"}),
            ),
        ),
    )
    pod = make_pod("init-pod", ["true"])
    pod.spec.init_containers = [client.V1Container(name="fetch", image="x", command=["sh", "-c", "exit 2"])]
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "init-pod", ("Failed",))
    header, rows = _header_and_rows(_kubectl(sim, "get", "pvc", "-n", ns))
    assert header == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS", "AGE"]
    volume = core.read_namespaced_persistent_volume_claim("ckpt", ns).spec.volume_name
    assert rows["ckpt"][1:6] == ["Bound", volume, "2Gi", "RWO", "standard"]
    _, rows = _header_and_rows(_kubectl(sim, "get", "pods", "-n", ns))
    assert rows["init-pod"][1:4] == ["0/1", "Init:Error", "0"]
    assert _kubectl(sim, "logs", "-n", ns, "init-pod", "-c", "fetch") == ""


def test_kubectl_get_with_label_and_field_selectors(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    for name, tier in (("sel-a", "front"), ("sel-b", "back"), ("sel-c", "back")):
        pod = make_pod(name, ["python", "-c", "print(1)"])
        pod.metadata.labels = {"tier": tier}
        core.create_namespaced_pod(ns, pod)
    for name in ("sel-a", "sel-b", "sel-c"):
        wait_phase(core, ns, name, ("Succeeded",))
    names = "-o=jsonpath={.items[*].metadata.name}"
    assert _kubectl(sim, "get", "pods", "-n", ns, "-l", "tier=back", names).split() == ["sel-b", "sel-c"]
    assert _kubectl(sim, "get", "pods", "-n", ns, "-l", "tier notin (back)", names).split() == ["sel-a"]
    by_name = _kubectl(sim, "get", "pods", "-n", ns, "--field-selector", "metadata.name=sel-c", names)
    assert by_name.split() == ["sel-c"]
    done = _kubectl(sim, "get", "pods", "-n", ns, "--field-selector", "status.phase=Succeeded", names)
    assert sorted(done.split()) == ["sel-a", "sel-b", "sel-c"]


def test_kubectl_shows_a_pod_deleted_on_an_unreachable_node_as_terminating(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    node = "kubectl-silent-node"
    sim.add_gpu_node(node, gpus=1, taints=[{"key": "kubesim.test/kubectl", "effect": "NoSchedule"}])
    pod = make_pod("stranded", ["sleep", "60"])
    pod.spec.node_selector = {"kubernetes.io/hostname": node}
    pod.spec.tolerations = [client.V1Toleration(key="kubesim.test/kubectl", operator="Exists")]
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "stranded", ("Running",))
    sim.set_node_ready(node, False)
    nodes = lambda: _header_and_rows(_kubectl(sim, "get", "nodes"))[1]  # noqa: E731
    sim.wait_for(lambda: nodes()[node][1] == "NotReady", timeout=20)
    _kubectl(sim, "delete", "pod", "-n", ns, "stranded", "--wait=false")
    _, rows = _header_and_rows(_kubectl(sim, "get", "pods", "-n", ns))
    assert rows["stranded"][2] == "Terminating"
    _kubectl(sim, "delete", "pod", "-n", ns, "stranded", "--force", "--grace-period=0")
    assert "stranded" not in _kubectl(sim, "get", "pods", "-n", ns, "-o", "name")
    sim.set_node_ready(node, True)


def test_kubectl_get_storageclasses_marks_the_default(sim: KubeSim) -> None:
    text = _kubectl(sim, "get", "sc")
    lines = [line.split() for line in text.strip().splitlines()]
    assert lines[0] == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    rows = {cells[0]: cells for cells in lines[1:]}
    assert rows["standard"][1:6] == ["(default)", "kubesim.io/local-path", "Delete", "Immediate", "false"]
    assert rows["kubesim-shared"][1:5] == ["kubesim.io/shared", "Delete", "Immediate", "false"]
    assert (
        _kubectl(sim, "get", "storageclass", "standard", "-o", "jsonpath={.provisioner}")
        == "kubesim.io/local-path"
    )


def test_kubectl_get_priorityclasses_prints_value_default_and_policy(sim: KubeSim) -> None:
    lines = [line.split() for line in _kubectl(sim, "get", "pc").strip().splitlines()]
    assert lines[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    rows = {cells[0]: cells for cells in lines[1:]}
    assert rows["system-cluster-critical"][1:3] == ["2000000000", "false"]
    assert rows["system-node-critical"][-1] == "PreemptLowerPriority"
