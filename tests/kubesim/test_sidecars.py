"""Sidecars, a failing admission webhook and kubelet admission rejections, as a real cluster shows them:
native sidecars (init containers with restartPolicy Always) start first, keep running and stop after the
main containers, whose result is the pod's phase; the injector adds a never-ending sidecar to pods of
labelled namespaces (a classic one keeps the pod Running after its main container ended); pod creations
answered 500 as when a webhook fails; pods a kubelet rejects end Failed with the rejection's reason."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.sidecars import INJECT_LABEL, SIDECAR_NAME
from kubesim.testing import KubeSim
from tests.kubesim.conftest import error_body, make_pod, wait_for, wait_phase

pytestmark = pytest.mark.slow

# Serves until SIGTERM (then exits 0), leaving a mark that it started: the main container checks it.
SIDECAR = "touch /shared/sidecar-up; trap 'exit 0' TERM; while true; do sleep 0.05; done"


def _native(name: str, main: str) -> client.V1Pod:
    mounts = [client.V1VolumeMount(name="shared", mount_path="/shared")]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=5,
            init_containers=[
                client.V1Container(
                    name="proxy",
                    image="proxy:1",
                    command=["sh", "-c", SIDECAR],
                    restart_policy="Always",
                    volume_mounts=mounts,
                ),
                client.V1Container(name="fetch", image="fetch:1", command=["true"], volume_mounts=mounts),
            ],
            containers=[
                client.V1Container(name="main", image="x", command=["sh", "-c", main], volume_mounts=mounts)
            ],
            volumes=[client.V1Volume(name="shared", empty_dir=client.V1EmptyDirVolumeSource())],
        ),
    )


def _states(pod: client.V1Pod, section: str = "container_statuses") -> dict[str, Any]:
    return {s.name: s.state for s in getattr(pod.status, section) or []}


@pytest.mark.parametrize(("code", "phase"), [(0, "Succeeded"), (3, "Failed")])
def test_a_native_sidecar_starts_first_runs_beside_the_main_container_and_stops_after_it(
    core: client.CoreV1Api, ns: str, code: int, phase: str
) -> None:
    main = f"test -f /shared/sidecar-up || exit 9; sleep 0.3; exit {code}"
    core.create_namespaced_pod(ns, _native("native", main))

    def main_running() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("native", ns)
        return pod if _states(pod).get("main") and _states(pod)["main"].running else None

    running = wait_for(main_running)
    assert running.status.phase == "Running"
    inits = _states(running, "init_container_statuses")
    assert inits["proxy"].running is not None and inits["fetch"].terminated.exit_code == 0

    pod = wait_phase(core, ns, "native", ("Succeeded", "Failed"))
    assert pod.status.phase == phase, "the pod's phase follows its main container, not the sidecar"
    assert _states(pod)["main"].terminated.exit_code == code
    proxy = _states(pod, "init_container_statuses")["proxy"].terminated
    assert proxy is not None and proxy.exit_code == 0, "the sidecar was told to stop once main ended"


def test_a_container_restart_policy_is_refused_outside_init_containers(
    core: client.CoreV1Api, ns: str
) -> None:
    pod = make_pod("bad", ["true"])
    pod.spec.containers[0].restart_policy = "Always"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, pod)
    assert err.value.status == 422
    assert "restartPolicy" in error_body(err.value)["message"]


@pytest.fixture
def injected(sim: KubeSim, core: client.CoreV1Api, ns: str) -> Iterator[str]:
    core.patch_namespace(ns, {"metadata": {"labels": {INJECT_LABEL: "true"}}})
    sim.inject_sidecars("classic")
    try:
        yield ns
    finally:
        sim.inject_sidecars(None)


def test_an_injected_classic_sidecar_keeps_the_pod_running_after_its_main_container_exits(
    core: client.CoreV1Api, injected: str
) -> None:
    core.create_namespaced_pod(injected, make_pod("meshed", ["sh", "-c", "exit 0"]))
    pod = core.read_namespaced_pod("meshed", injected)
    assert [c.name for c in pod.spec.containers] == ["main", SIDECAR_NAME]

    def main_ended() -> client.V1Pod | None:
        current = core.read_namespaced_pod("meshed", injected)
        state = _states(current).get("main")
        return current if state is not None and state.terminated else None

    pod = main_ended() or wait_for(main_ended)
    assert pod.status.phase == "Running", "a sidecar that never ends keeps the pod Running"
    assert _states(pod)[SIDECAR_NAME].running is not None


def test_the_injector_adds_nothing_in_unlabelled_namespaces_and_is_switched_over_http(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310
            f"{sim.url}/kubesim/sidecars",
            data=json.dumps(body).encode(),
            method="POST",
            headers=sim.auth_headers(),
        )
        with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
            return json.loads(response.read())

    try:
        assert post({"mode": "native"})["mode"] == "native"
        core.create_namespaced_pod(ns, make_pod("plain", ["true"]))
        assert not core.read_namespaced_pod("plain", ns).spec.init_containers
        core.patch_namespace(ns, {"metadata": {"labels": {INJECT_LABEL: "true"}}})
        core.create_namespaced_pod(ns, make_pod("meshed", ["true"]))
        [sidecar] = core.read_namespaced_pod("meshed", ns).spec.init_containers or []
        assert (sidecar.name, sidecar.restart_policy) == (SIDECAR_NAME, "Always")
        assert wait_phase(core, ns, "meshed", ("Succeeded", "Failed")).status.phase == "Succeeded"
    finally:
        assert post({"mode": None})["mode"] is None


def test_pod_creations_fail_as_with_a_broken_webhook_then_recover(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    rule = sim.fail_pod_creates(ns, count=2)
    try:
        for _ in range(2):
            with pytest.raises(ApiException) as err:
                core.create_namespaced_pod(ns, make_pod("hooked", ["true"]))
            assert err.value.status == 500
            assert error_body(err.value)["message"].startswith(
                "Internal error occurred: failed calling webhook"
            )
        assert core.list_namespaced_pod(ns).items == [], "nothing was stored"
        core.create_namespaced_pod(ns, make_pod("hooked", ["true"]))
    finally:
        sim.cluster.faults.clear(rule.id)
    wait_phase(core, ns, "hooked", ("Succeeded",))


@pytest.mark.parametrize("reason", ["UnexpectedAdmissionError", "OutOfnvidia.com/gpu"])
def test_a_kubelet_admission_rejection_fails_the_pod_with_its_reason(
    sim: KubeSim, core: client.CoreV1Api, ns: str, reason: str
) -> None:
    rule = sim.reject_pod_admission(f"^{ns}/rejected$", reason=reason, count=1)
    try:
        core.create_namespaced_pod(ns, make_pod("rejected", ["sleep", "30"]))
        pod = wait_phase(core, ns, "rejected", ("Failed", "Running", "Succeeded"))
    finally:
        sim.clear_admission_rejections(rule)
    assert (pod.status.phase, pod.status.reason) == ("Failed", reason)
    assert pod.status.message.startswith("Pod was rejected: ")
    assert not pod.status.container_statuses, "no container was started"


def test_a_kubelet_eviction_kills_the_pod_and_leaves_it_failed_evicted(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, make_pod("pressed", ["sleep", "30"]))
    wait_phase(core, ns, "pressed", ("Running",))
    sim.kubelet_evict(ns, "pressed")
    pod = wait_phase(core, ns, "pressed", ("Failed",))
    assert (pod.status.reason, pod.metadata.deletion_timestamp) == ("Evicted", None)
    assert pod.status.message.startswith("The node was low on resource: memory.")
    [target] = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert (target.status, target.reason) == ("True", "TerminationByKubelet")
    assert _states(pod)["main"].terminated.exit_code == 137


def test_webhook_failures_and_kubelet_rejections_are_injected_over_http(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    def call(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310
            f"{sim.url}/kubesim/{path}", data=data, method=method, headers=sim.auth_headers()
        )
        with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
            return response.status, json.loads(response.read())

    status, rule = call("POST", "podcreates", {"namespace": ns, "code": 503, "count": 1})
    assert status == 201 and rule["method"] == "POST"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, make_pod("first", ["true"]))
    assert err.value.status == 503

    status, rejection = call(
        "POST", "admission", {"pattern": f"^{ns}/", "reason": "UnexpectedAdmissionError"}
    )
    assert status == 201 and "unexpected" in rejection["message"]
    assert call("GET", "admission")[1]["items"] == [rejection]
    try:
        core.create_namespaced_pod(ns, make_pod("second", ["true"]))
        pod = wait_phase(core, ns, "second", ("Failed", "Succeeded"))
    finally:
        call("DELETE", "admission")
    assert pod.status.reason == "UnexpectedAdmissionError"
    assert call("GET", "admission")[1]["items"] == []
