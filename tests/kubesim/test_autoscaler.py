"""The cluster autoscaler emulation: node groups that grow from zero for unschedulable pods and for
ProvisioningRequests (atomic scale-up of a whole gang, or a capacity check), and shrink when idle. The
requests' conditions, reasons and timings are the Cluster Autoscaler's (kubernetes/autoscaler,
cluster-autoscaler/provisioningrequest and processors/provreq; docs/kubesim.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from clusterio.builders import JobPodsSpec
from clusterio.client import Cluster
from kubesim.autoscaler import (
    ACCEPTED_MESSAGE,
    ATOMIC,
    BOOKING_SECONDS,
    CHECK,
    CONSUME,
    EXPIRY_SECONDS,
    FOUND_MESSAGE,
    GROUP_LABEL,
    NOT_FOUND_MESSAGE,
)
from kubesim.cli import build_parser
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

POOL = "gpu-pool"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATION = client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


@pytest.fixture(scope="module")
def scaling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    """No GPU node at start; one group of tainted 4-GPU nodes that may grow from 0 to 2."""
    group = {
        "name": POOL,
        "gpus": 4,
        "gpu_product": "NVIDIA-A100",
        "cpu": 16,
        "memory": 64 * 2**30,
        "taints": [TAINT],
        "min_nodes": 0,
        "max_nodes": 2,
    }
    with running_kubesim(
        tmp_path_factory.mktemp("autoscaler"),
        local_gpu_count=0,
        restart_backoff=0.2,
        node_groups=[group],
        scale_up_delay=0.3,
        scale_down_idle=1.0,
    ) as sim:
        yield sim


@pytest.fixture
def apis(scaling: KubeSim) -> Iterator[tuple[client.CoreV1Api, client.CustomObjectsApi]]:
    api_client = scaling.api_client()
    yield client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    api_client.close()


@pytest.fixture
def ns(apis: tuple[client.CoreV1Api, client.CustomObjectsApi]) -> Iterator[str]:
    """A fresh namespace, with the pool back at zero nodes before the test starts."""
    core = apis[0]
    wait_for(lambda: not pool_nodes(core), timeout=30)
    name = f"as-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def pool_nodes(core: client.CoreV1Api) -> list[str]:
    return [str(n.metadata.name) for n in core.list_node(label_selector=f"{GROUP_LABEL}={POOL}").items]


def gpu_pod(name: str, gpus: int, seconds: float = 0.5, annotations: dict[str, str] | None = None) -> Any:
    pod = make_pod(
        name,
        ["sleep", str(seconds)],
        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
    )
    pod.spec.tolerations = [TOLERATION]
    pod.metadata.annotations = annotations
    return pod


def request_body(name: str, template: str, count: int, kind: str = ATOMIC) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": kind,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
        },
    }


def make_template(core: client.CoreV1Api, ns: str, name: str, gpus: int) -> None:
    pod = gpu_pod("learner", gpus)
    body = client.V1PodTemplate(
        metadata=client.V1ObjectMeta(name=name),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "learner"}), spec=pod.spec
        ),
    )
    core.create_namespaced_pod_template(ns, body)


def condition(custom: client.CustomObjectsApi, ns: str, name: str, type_: str) -> dict[str, Any] | None:
    obj = cast(
        dict[str, Any],
        custom.get_namespaced_custom_object_status(
            "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", name
        ),
    )
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def test_provisioning_requests_are_in_discovery(
    apis: tuple[client.CoreV1Api, client.CustomObjectsApi],
) -> None:
    api_client = apis[0].api_client
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert "autoscaling.x-k8s.io" in groups
    found = client.CustomObjectsApi(api_client).get_api_resources("autoscaling.x-k8s.io", "v1")
    names = {r.name for r in found.resources}
    assert {"provisioningrequests", "provisioningrequests/status"} <= names


def test_unschedulable_gpu_pod_scales_the_pool_up_from_zero_and_the_idle_node_goes(
    apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    core = apis[0]
    core.create_namespaced_pod(ns, gpu_pod("one-gpu", 1))
    pod = wait_phase(core, ns, "one-gpu", ("Succeeded",), timeout=30)
    assert pod.spec.node_name in pool_nodes(core)
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=one-gpu").items
    assert "TriggeredScaleUp" in {e.reason for e in events}
    core.delete_namespaced_pod("one-gpu", ns, grace_period_seconds=0)
    wait_for(lambda: not pool_nodes(core), timeout=30)


def test_pod_no_node_shape_fits_triggers_no_scale_up(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    core = apis[0]
    core.create_namespaced_pod(ns, gpu_pod("too-big", 8))
    wait_for(lambda: core.read_namespaced_pod("too-big", ns).status.conditions)
    with scaling.cluster.loop_lock:
        scaling.cluster.autoscaler.step()
    assert not scaling.cluster.autoscaler.in_flight
    assert pool_nodes(core) == []
    assert core.read_namespaced_pod("too-big", ns).status.phase == "Pending"


def test_atomic_request_provisions_the_whole_gang_at_once_for_its_pods(
    apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    core, custom = apis
    make_template(core, ns, "learners", 4)
    custom.create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", request_body("gang", "learners", 2)
    )
    provisioned = wait_for(
        lambda: (c := condition(custom, ns, "gang", "Provisioned")) and c["status"] == "True" and c
    )
    # Best effort: Provisioned as soon as the scale-up is asked for, before the nodes are up.
    assert (provisioned["reason"], provisioned["message"]) == ("CapacityIsProvisioned", FOUND_MESSAGE)
    accepted = condition(custom, ns, "gang", "Accepted")
    assert (accepted["status"], accepted["reason"], accepted["message"]) == (
        "True",
        "Accepted",
        ACCEPTED_MESSAGE,
    )
    wait_for(lambda: len(pool_nodes(core)) == 2)
    for i in range(2):
        core.create_namespaced_pod(ns, gpu_pod(f"learner-{i}", 4, annotations={CONSUME: "gang"}))
    placed = {
        wait_phase(core, ns, f"learner-{i}", ("Succeeded",), timeout=30).spec.node_name for i in range(2)
    }
    assert placed == set(pool_nodes(core))
    # Once every pod the request asked for is on a node, the booking is consumed.
    consumed = wait_for(lambda: condition(custom, ns, "gang", "BookingExpired"))
    assert (consumed["status"], consumed["reason"]) == ("True", "CapacityBookingConsumed")
    assert condition(custom, ns, "gang", "Failed") is None
    custom.delete_namespaced_custom_object("autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", "gang")
    for i in range(2):
        core.delete_namespaced_pod(f"learner-{i}", ns, grace_period_seconds=0)
    wait_for(lambda: not pool_nodes(core), timeout=30)


def test_atomic_request_beyond_the_pool_maximum_is_retried_not_failed_and_adds_no_node(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """The best-effort atomic class never fails for want of room: Provisioned=False CapacityIsNotFound,
    tried again every pass, and no node at all (a ValidUntilSeconds parameter changes nothing: the Cluster
    Autoscaler does not read it)."""
    core, custom = apis
    make_template(core, ns, "learners", 4)
    body = request_body("huge", "learners", 3)
    body["spec"]["parameters"] = {"ValidUntilSeconds": "0"}
    custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", body)
    found = wait_for(lambda: condition(custom, ns, "huge", "Provisioned"))
    assert (found["status"], found["reason"], found["message"]) == (
        "False",
        "CapacityIsNotFound",
        NOT_FOUND_MESSAGE,
    )
    later = scaling.cluster.autoscaler.passes + 3
    wait_for(lambda: scaling.cluster.autoscaler.passes >= later)
    assert condition(custom, ns, "huge", "Failed") is None
    assert not scaling.cluster.autoscaler.in_flight
    assert pool_nodes(core) == []


def test_a_request_unprovisioned_past_the_expiry_fails_expired(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """A request still not provisioned `expiry_seconds` after its creation (the Cluster Autoscaler's 7 days;
    0 here) is Failed, reason Expired, and gets no node."""
    core, custom = apis
    make_template(core, ns, "late", 4)
    autoscaler = scaling.cluster.autoscaler
    autoscaler.expiry_seconds = 0
    try:
        custom.create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", request_body("late", "late", 3)
        )
        failed = wait_for(lambda: condition(custom, ns, "late", "Failed"))
    finally:
        autoscaler.expiry_seconds = EXPIRY_SECONDS
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True",
        "Expired",
        "ProvisioningRequest is expired",
    )
    assert not autoscaler.in_flight
    assert pool_nodes(core) == []


def test_a_booking_not_consumed_in_time_expires(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """Provisioned capacity is booked for the request's pods for `booking_seconds` (10 minutes; 0 here):
    no pod came, so BookingExpired CapacityReservationTimeExpired, and the idle node goes."""
    core, custom = apis
    make_template(core, ns, "idle", 4)
    autoscaler = scaling.cluster.autoscaler
    autoscaler.booking_seconds = 0
    try:
        custom.create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", request_body("idle", "idle", 1)
        )
        expired = wait_for(lambda: condition(custom, ns, "idle", "BookingExpired"))
    finally:
        autoscaler.booking_seconds = BOOKING_SECONDS
    assert (expired["status"], expired["reason"]) == ("True", "CapacityReservationTimeExpired")
    assert condition(custom, ns, "idle", "Provisioned")["status"] == "True"
    wait_for(lambda: not pool_nodes(core), timeout=30)


def test_a_revoked_request_says_capacity_revoked(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """`revoke` emulates a cloud provider that takes provisioned capacity back (CapacityRevoked=True): the
    Cluster Autoscaler itself never sets it."""
    core, custom = apis
    make_template(core, ns, "taken", 4)
    custom.create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", request_body("taken", "taken", 1)
    )
    wait_for(lambda: (c := condition(custom, ns, "taken", "Provisioned")) and c["status"] == "True")
    wait_for(lambda: len(pool_nodes(core)) == 1)
    scaling.cluster.autoscaler.revoke(ns, "taken")
    revoked = condition(custom, ns, "taken", "CapacityRevoked")
    assert revoked is not None and revoked["status"] == "True"
    custom.delete_namespaced_custom_object("autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", "taken")
    wait_for(lambda: not pool_nodes(core), timeout=30)


def test_check_capacity_request_only_checks(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    core, custom = apis
    make_template(core, ns, "learners", 1)
    custom.create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", request_body("check", "learners", 1, CHECK)
    )
    found = wait_for(lambda: condition(custom, ns, "check", "Provisioned"))
    assert (found["status"], found["reason"], found["message"]) == (
        "False",
        "CapacityIsNotFound",
        NOT_FOUND_MESSAGE,
    )
    assert condition(custom, ns, "check", "Failed") is None
    # With noRetry the same answer is final: Failed=True, CapacityIsNotFound.
    body = request_body("once", "learners", 1, CHECK)
    body["spec"]["parameters"] = {"noRetry": "true"}
    custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", body)
    failed = wait_for(lambda: condition(custom, ns, "once", "Failed"))
    assert (failed["status"], failed["reason"]) == ("True", "CapacityIsNotFound")
    assert not scaling.cluster.autoscaler.in_flight
    assert pool_nodes(core) == []


def test_node_group_option_parses_json() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--state-dir",
            "s",
            "--kubeconfig",
            "k",
            "--node-group",
            '{"name": "a", "gpus": 8, "max_nodes": 3}',
        ]
    )
    assert args.node_group == [{"name": "a", "gpus": 8, "max_nodes": 3}]


def test_the_status_configmap_reports_each_group_as_the_cluster_autoscaler_does(
    apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """kube-system/cluster-autoscaler-status, YAML under `status` (Cluster Autoscaler 1.30+): the group's
    minSize, maxSize and cloudProviderTarget, which follows a scale-up."""
    from clusterio.autoscalerstatus import parse_status

    core = apis[0]

    def sizes() -> Any:
        found = core.read_namespaced_config_map("cluster-autoscaler-status", "kube-system")
        return parse_status(found.data["status"]).get(POOL)

    size = wait_for(sizes, timeout=30)
    assert (size.min_nodes, size.max_nodes) == (0, 2)
    core.create_namespaced_pod(ns, gpu_pod("wants-gpu", 1))
    wait_for(lambda: (sizes().target or 0) >= 1, timeout=30)
    wait_phase(core, ns, "wants-gpu", ("Succeeded",), timeout=30)
    core.delete_namespaced_pod("wants-gpu", ns, grace_period_seconds=0)


def test_the_platform_reads_the_autoscalers_conditions(
    scaling: KubeSim, apis: tuple[client.CoreV1Api, client.CustomObjectsApi], ns: str
) -> None:
    """clusterio's `provision` as the engine's launch calls it, against the emulated autoscaler: waiting
    (with the autoscaler's words) while it finds no room, provisioned once it asked for the nodes, still
    provisioned after the pods consumed the booking (a relaunch adopts them), failed once revoked."""
    core, custom = apis
    cluster = Cluster(kubeconfig=str(scaling.kubeconfig_path), request_timeout=5.0, retries=2, backoff=0.01)
    fields: dict[str, Any] = {
        "job_id": "prov1", "attempt": 1, "tenant": "t", "namespace": ns, "image": "busybox",
        "command": ["sleep", "1"], "learners": 3, "gpus": 4, "cpu_millis": 100, "memory_mib": 64,
        "checkpoint_dir": "/ckpt", "data_dir": "/data", "result_dir": "/results",
    }  # fmt: skip
    too_big = cluster.provision(spec=JobPodsSpec(**fields))
    assert not too_big.provisioned and not too_big.failed
    waiting = wait_for(lambda: cluster.provision(spec=JobPodsSpec(**fields)).waiting)
    assert waiting == f"CapacityIsNotFound: {NOT_FOUND_MESSAGE}"

    gang = JobPodsSpec(**(fields | {"job_id": "prov2", "learners": 1}))
    state = wait_for(lambda: (s := cluster.provision(spec=gang)).provisioned and s)
    wait_for(lambda: len(pool_nodes(core)) == 1)
    pod = gpu_pod("consumer", 4, seconds=30, annotations={CONSUME: state.name})
    core.create_namespaced_pod(ns, pod)
    wait_for(lambda: (c := condition(custom, ns, state.name, "BookingExpired")) and c["status"] == "True")
    assert cluster.provision(spec=gang).provisioned
    scaling.cluster.autoscaler.revoke(ns, state.name)
    assert cluster.provision(spec=gang).failed.startswith("CapacityRevoked")
    core.delete_namespaced_pod("consumer", ns, grace_period_seconds=0)
    for name in (state.name, too_big.name):
        custom.delete_namespaced_custom_object("autoscaling.x-k8s.io", "v1", ns, "provisioningrequests", name)
    wait_for(lambda: not pool_nodes(core), timeout=30)
