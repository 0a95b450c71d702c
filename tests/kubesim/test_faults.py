"""Fault injection: node loss, NotReady nodes, API errors and hangs, paused kubelet, stepping mode."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase


def test_lost_node_is_deleted_and_pod_gc_force_deletes_its_pods(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    sim.add_gpu_node("doomed-node", gpus=1, labels={"pool": "doomed"})
    pod = make_pod("victim", ["sleep", "60"])
    pod.spec.node_selector = {"pool": "doomed"}
    core.create_namespaced_pod(ns, pod)
    running = wait_phase(core, ns, "victim", ("Running",))
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        field_selector="metadata.name=victim",
        resource_version=running.metadata.resource_version,
        timeout_seconds=20,
    )
    sim.lose_node("doomed-node")
    events = []
    for event in stream:
        events.append((event["type"], event["object"]))
        if event["type"] == "DELETED":
            break
    kind, last = events[-1]
    assert kind == "DELETED" and last.status.phase == "Failed"
    gc = next(c for c in last.status.conditions if c.type == "DisruptionTarget")
    assert (gc.status, gc.reason, gc.message) == ("True", "DeletionByPodGC", "PodGC: node no longer exists")
    assert "doomed-node" not in [n.metadata.name for n in core.list_node().items]


def test_not_ready_node_gets_no_new_pods(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    sim.add_gpu_node("flaky-node", gpus=1, labels={"pool": "flaky"})
    sim.set_node_ready("flaky-node", False)
    wait_for(lambda: core.read_node("flaky-node").spec.taints)
    pod = make_pod("waiting", ["true"])
    pod.spec.node_selector = {"pool": "flaky"}
    core.create_namespaced_pod(ns, pod)
    wait_for(
        lambda: next(
            (
                c
                for c in core.read_namespaced_pod("waiting", ns).status.conditions or []
                if c.type == "PodScheduled" and c.reason == "Unschedulable"
            ),
            None,
        )
    )
    assert core.read_namespaced_pod("waiting", ns).spec.node_name is None
    sim.set_node_ready("flaky-node", True)
    wait_phase(core, ns, "waiting", ("Succeeded",))


def test_injected_error_code_is_returned_then_cleared(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    sim.inject_fault("GET", rf"^/api/v1/namespaces/{ns}/pods$", code=503, count=1)
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(ns)
    assert err.value.status == 503
    assert core.list_namespaced_pod(ns).items == []


def test_injected_hang_times_out_the_client(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    sim.inject_fault("*", rf"/namespaces/{ns}/configmaps", hang_seconds=2)
    try:
        with pytest.raises(HTTPError):
            core.list_namespaced_config_map(ns, _request_timeout=0.3)
    finally:
        sim.clear_faults()


def test_admin_endpoint_injects_faults(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    rule = json.dumps(
        {"method": "GET", "path": f"/namespaces/{ns}/secrets", "code": 500, "count": 1}
    ).encode()
    request = urllib.request.Request(  # noqa: S310
        f"{sim.url}/kubesim/faults", data=rule, method="POST", headers=sim.auth_headers()
    )
    with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
        assert response.status == 201
    with pytest.raises(ApiException) as err:
        core.list_namespaced_secret(ns)
    assert err.value.status == 500


def test_paused_kubelet_leaves_pod_pending(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    sim.pause_kubelet(True)
    try:
        core.create_namespaced_pod(ns, make_pod("frozen", ["true"]))
        time.sleep(0.3)
        assert core.read_namespaced_pod("frozen", ns).status.phase == "Pending"
    finally:
        sim.pause_kubelet(False)
    wait_phase(core, ns, "frozen", ("Succeeded",))


def test_stepping_mode_advances_only_on_step(tmp_path: Path) -> None:
    with running_kubesim(tmp_path, auto=False) as stepped:
        core = client.CoreV1Api(stepped.api_client())
        core.create_namespaced_pod("default", make_pod("manual", ["true"]))
        time.sleep(0.2)
        assert core.read_namespaced_pod("manual", "default").spec.node_name is None
        stepped.step()
        assert core.read_namespaced_pod("manual", "default").spec.node_name == "kubesim-node"
        stepped.wait_for(lambda: core.read_namespaced_pod("manual", "default").status.phase == "Succeeded")
