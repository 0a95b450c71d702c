"""Disruptions: NotReady nodes and the taint manager, the Eviction API, and injected image pull failures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim
from tests.kubesim.conftest import error_body, make_pod, name_of, table_rows, wait_for, wait_phase

UNREACHABLE = "node.kubernetes.io/unreachable"
_DEDICATED = client.V1Toleration(key="kubesim.test/dedicated", operator="Exists", effect="NoSchedule")


def _condition(pod: client.V1Pod, type_: str) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == type_), None)


def _pod_on(node: str, name: str, unreachable_seconds: int | None) -> client.V1Pod:
    pod = make_pod(name, ["sleep", "60"])
    pod.spec.node_selector = {"kubernetes.io/hostname": node}
    pod.spec.tolerations = [_DEDICATED]
    if unreachable_seconds is not None:
        pod.spec.tolerations.append(
            client.V1Toleration(
                key=UNREACHABLE, operator="Exists", effect="NoExecute", toleration_seconds=unreachable_seconds
            )
        )
    return pod


def _unreachable(core: client.CoreV1Api, node: str) -> client.V1Node | None:
    status = core.read_node(node)
    ready = next(c for c in status.status.conditions if c.type == "Ready")
    return status if ready.status == "Unknown" else None


def test_node_without_heartbeat_goes_unknown_and_its_pods_stay_terminating_after_toleration(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    node = "partitioned-node"
    sim.add_gpu_node(node, gpus=1, taints=[{"key": "kubesim.test/dedicated", "effect": "NoSchedule"}])
    core.create_namespaced_pod(ns, _pod_on(node, "short", 1))
    core.create_namespaced_pod(ns, _pod_on(node, "patient", None))  # gets the default 300 s toleration
    for name in ("short", "patient"):
        wait_phase(core, ns, name, ("Running",))
    sim.set_node_ready(node, False)  # the kubelet stops posting heartbeats

    status = wait_for(lambda: _unreachable(core, node))
    ready = next(c for c in status.status.conditions if c.type == "Ready")
    assert (ready.reason, ready.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    assert {(t.key, t.effect) for t in status.spec.taints} >= {
        (UNREACHABLE, "NoSchedule"),
        (UNREACHABLE, "NoExecute"),
    }

    def unready(name: str) -> bool:
        return _condition(core.read_namespaced_pod(name, ns), "Ready").status == "False"

    wait_for(lambda: unready("short") and unready("patient"))

    # After its 1 s toleration the taint manager deletes "short"; no kubelet confirms, so it stays Terminating.
    def terminating() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("short", ns)
        return pod if pod.metadata.deletion_timestamp else None

    short = wait_for(terminating)
    disruption = _condition(short, "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "DeletionByTaintManager")
    assert short.metadata.deletion_grace_period_seconds == 2
    assert short.status.phase == "Running"
    patient = core.read_namespaced_pod("patient", ns)
    assert patient.metadata.deletion_timestamp is None and _condition(patient, "DisruptionTarget") is None
    assert [t.toleration_seconds for t in patient.spec.tolerations if t.key == UNREACHABLE] == [300]

    sim.set_node_ready(node, True)  # heartbeats again: the taints go and the kubelet confirms the deletion
    wait_for(lambda: not [t for t in core.read_node(node).spec.taints or [] if t.key == UNREACHABLE])
    assert next(c for c in core.read_node(node).status.conditions if c.type == "Ready").status == "True"
    wait_for(lambda: _condition(core.read_namespaced_pod("patient", ns), "Ready").status == "True")
    wait_for(lambda: "short" not in [name_of(p) for p in core.list_namespaced_pod(ns).items])
    core.delete_namespaced_pod("patient", ns, grace_period_seconds=0)


def test_a_pod_stuck_terminating_on_an_unreachable_node_stops_counting_against_quota_after_its_grace(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    """As the apiserver's quota evaluator (``QuotaV1Pod``): a pod being deleted is charged until
    ``deletionTimestamp`` + ``deletionGracePeriodSeconds`` has passed, then no longer, though it is still
    stored (``count/pods`` counts it) and Terminating because no kubelet confirms the deletion."""
    node = "quota-partitioned-node"
    sim.add_gpu_node(node, gpus=1, taints=[{"key": "kubesim.test/dedicated", "effect": "NoSchedule"}])
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="pods"),
        spec=client.V1ResourceQuotaSpec(hard={"pods": "1", "requests.cpu": "1", "count/pods": "5"}),
    )
    core.create_namespaced_resource_quota(ns, quota)
    stuck = _pod_on(node, "stuck", None)
    stuck.spec.termination_grace_period_seconds = 5
    stuck.spec.containers[0].resources = client.V1ResourceRequirements(requests={"cpu": "500m"})
    core.create_namespaced_pod(ns, stuck)
    wait_phase(core, ns, "stuck", ("Running",))
    sim.set_node_ready(node, False)
    wait_for(lambda: _unreachable(core, node))
    core.delete_namespaced_pod("stuck", ns)
    replacement = make_pod(
        "replacement", ["true"], resources=client.V1ResourceRequirements(requests={"cpu": "1"})
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, replacement)
    assert err.value.status == 403 and "exceeded quota" in error_body(err.value)["message"]
    meta = core.read_namespaced_pod("stuck", ns).metadata
    assert meta.deletion_grace_period_seconds == 5
    charged_until = meta.deletion_timestamp + timedelta(seconds=5)

    def used() -> dict[str, str]:
        return core.read_namespaced_resource_quota("pods", ns).status.used or {}

    released = wait_for(lambda: used() if used().get("pods") == "0" else None, timeout=30)
    assert datetime.now(UTC) > charged_until
    assert released == {"pods": "0", "requests.cpu": "0", "count/pods": "1"}
    assert core.read_namespaced_pod("stuck", ns).metadata.deletion_timestamp is not None
    core.create_namespaced_pod(ns, replacement)

    core.delete_namespaced_pod("stuck", ns, grace_period_seconds=0)  # force: the apiserver forgets it
    wait_for(lambda: "stuck" not in [name_of(p) for p in core.list_namespaced_pod(ns).items])
    sim.set_node_ready(node, True)


def test_deletion_timestamp_is_the_end_of_the_grace_period(core: client.CoreV1Api, ns: str) -> None:
    pod = make_pod(
        "slow-stop",
        [
            "python",
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\ntime.sleep(60)",
        ],
    )
    pod.spec.termination_grace_period_seconds = 30
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "slow-stop", ("Running",))
    wait_for(lambda: "up" in core.read_namespaced_pod_log("slow-stop", ns))
    before = datetime.now(UTC).replace(microsecond=0)
    core.delete_namespaced_pod("slow-stop", ns)
    terminating = core.read_namespaced_pod("slow-stop", ns)
    assert terminating.metadata.deletion_grace_period_seconds == 30
    assert terminating.metadata.deletion_timestamp >= before + timedelta(seconds=30)
    assert terminating.metadata.deletion_timestamp <= datetime.now(UTC) + timedelta(seconds=31)
    core.delete_namespaced_pod("slow-stop", ns, grace_period_seconds=0)


def test_eviction_api_sets_disruption_target_and_deletes_the_pod_gracefully(
    core: client.CoreV1Api, ns: str
) -> None:
    script = (
        "import signal, sys, time\n"
        "def stop(*_):\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    core.create_namespaced_pod(ns, make_pod("evictee", ["python", "-c", script]))
    wait_phase(core, ns, "evictee", ("Running",))
    wait_for(lambda: "ready" in core.read_namespaced_pod_log("evictee", ns))
    body = client.V1Eviction(
        api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name="evictee", namespace=ns)
    )
    stream = watch.Watch().stream(
        core.list_namespaced_pod, ns, field_selector="metadata.name=evictee", timeout_seconds=20
    )
    core.create_namespaced_pod_eviction("evictee", ns, body)
    seen: list[tuple[str, Any]] = []
    for event in stream:
        seen.append((event["type"], event["object"]))
        if event["type"] == "DELETED":
            break
    assert seen[-1][0] == "DELETED", "an evicted pod is deleted once it has stopped"
    final = seen[-1][1]
    disruption = _condition(final, "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "EvictionByEvictionAPI")
    assert final.metadata.deletion_timestamp is not None
    terminated = final.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0, "the SIGTERM handler ran and exited 0 within the grace period"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("nobody", ns, body)
    assert err.value.status == 404


def _waiting_reasons(core: client.CoreV1Api, ns: str, name: str, wanted: set[str]) -> dict[str, Any]:
    """Watch the pod until its container has waited with each reason in ``wanted``; return their states."""
    seen: dict[str, Any] = {}
    for event in watch.Watch().stream(
        core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}", timeout_seconds=10
    ):
        pod = event["object"]
        assert pod.status.phase == "Pending"
        for cs in pod.status.container_statuses or []:
            if cs.state.waiting is not None:
                seen.setdefault(cs.state.waiting.reason, cs.state.waiting)
            assert cs.state.running is None and cs.state.terminated is None
        if wanted <= set(seen):
            break
    return seen


def test_injected_image_pull_failure_keeps_container_waiting(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    image = f"registry.example/{ns}/broken:1.0"
    rule = sim.fail_image_pulls(rf"^registry\.example/{ns}/broken:")
    try:
        core.create_namespaced_pod(ns, make_pod("unpullable", ["sh", "-c", "echo ran"], image=image))
        seen = _waiting_reasons(core, ns, "unpullable", {"ErrImagePull", "ImagePullBackOff"})
        assert image in seen["ErrImagePull"].message and image in seen["ImagePullBackOff"].message
        with pytest.raises(ApiException) as err:
            core.read_namespaced_pod_log("unpullable", ns)
        assert err.value.status == 400 and error_body(err.value)["message"] in (
            'container "main" in pod "unpullable" is waiting to start: image can\'t be pulled',
            'container "main" in pod "unpullable" is waiting to start: trying and failing to pull image',
        )
    finally:
        sim.clear_image_pull_failures(rule)
    assert wait_phase(core, ns, "unpullable", ("Succeeded",)).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("unpullable", ns) == "ran\n"


def test_image_pull_failure_cycles_through_back_off_until_the_pull_works(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    image = f"registry.example/{ns}/flaky:2"
    rule = sim.fail_image_pulls(rf"^registry\.example/{ns}/flaky:")
    try:
        core.create_namespaced_pod(ns, make_pod("flaky", ["sh", "-c", "echo started"], image=image))
        shown: set[str] = set()

        def both_shown() -> bool:
            _, rows = table_rows(api_client, f"{sim.url}/api/v1/namespaces/{ns}/pods")
            shown.add(rows["flaky"][2])
            return {"ErrImagePull", "ImagePullBackOff"} <= shown

        wait_for(both_shown)  # kubectl get pods' STATUS column
        assert shown <= {"ErrImagePull", "ImagePullBackOff", "Pending", "ContainerCreating"}, shown

        def events() -> dict[tuple[str, str], int]:
            items = core.list_namespaced_event(ns, field_selector="involvedObject.name=flaky").items
            return {(str(e.reason), str(e.message)): int(e.count or 1) for e in items}

        wait_for(lambda: events().get(("Pulling", f'Pulling image "{image}"'), 0) >= 3)  # it keeps retrying
        seen = events()
        for reason, message in (
            ("Failed", f'Failed to pull image "{image}": kubesim: injected image pull failure'),
            ("Failed", "Error: ErrImagePull"),
            ("BackOff", f'Back-off pulling image "{image}"'),
            ("Failed", "Error: ImagePullBackOff"),
        ):
            assert (reason, message) in seen, seen
        uid = core.read_namespaced_pod("flaky", ns).metadata.uid
        with sim.cluster.loop_lock:  # each failed pull doubles the wait before the next one
            runtime = next(k.pods[uid] for k in sim.cluster.kubelets.values() if uid in k.pods)
            failures = runtime.pull_failures["main"]
            waited = runtime.backoff_until["main"] - runtime.pull_failed_at["main"]
        assert failures >= 3 and waited == pytest.approx(sim.cluster.restart_backoff * 2 ** (failures - 1))
        pod = core.read_namespaced_pod("flaky", ns)
        assert pod.status.phase == "Pending" and pod.status.container_statuses[0].restart_count == 0
    finally:
        sim.clear_image_pull_failures(rule)
    assert wait_phase(core, ns, "flaky", ("Succeeded",), timeout=30).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("flaky", ns) == "started\n"
    assert any(e.reason == "Pulled" for e in core.list_namespaced_event(ns).items)
