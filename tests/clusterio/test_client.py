"""`Cluster` against kubesim over HTTP: tenant fences, idempotent launch, teardown, retries, capacity."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from kubernetes import client

from clusterio import names
from clusterio.builders import TenantLimits, datastore_secret_keys
from clusterio.client import Cluster
from clusterio.errors import Conflict, Forbidden, NotFound, QuotaExceeded, Unavailable, error_for_status
from kubesim.testing import KubeSim
from tests.clusterio.conftest import (
    RETRIES,
    TENANT,
    Gate,
    job_spec,
    pod_phase,
    python,
    wait_file_code,
    wait_for,
)

CREDENTIALS = {"store": {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t"}}


def test_ensure_tenant_twice_is_idempotent_and_updates_a_changed_quota(
    cluster: Cluster, core: client.CoreV1Api, ns: str
) -> None:
    networking = client.NetworkingV1Api(core.api_client)

    def versions() -> list[str | None]:
        return [
            core.read_namespace(ns).metadata.resource_version,
            core.read_namespaced_resource_quota(names.RESOURCE_QUOTA_NAME, ns).metadata.resource_version,
            core.read_namespaced_limit_range(names.LIMIT_RANGE_NAME, ns).metadata.resource_version,
            networking.read_namespaced_network_policy(
                names.NETWORK_POLICY_NAME, ns
            ).metadata.resource_version,
            core.read_namespaced_service_account(names.SERVICE_ACCOUNT_NAME, ns).metadata.resource_version,
        ]

    limits = TenantLimits(gpus=2, cpu_millis=4000, memory_mib=8192, max_pods=10)
    cluster.ensure_tenant(namespace=ns, tenant_slug=TENANT, limits=limits)

    def quota_status_written() -> bool:  # the quota controller's first status update (as on a cluster)
        quota = core.read_namespaced_resource_quota(names.RESOURCE_QUOTA_NAME, ns)
        return bool(
            quota.status and quota.status.used and set(quota.status.used) == set(quota.spec.hard or {})
        )

    wait_for(quota_status_written)
    before = versions()
    cluster.ensure_tenant(namespace=ns, tenant_slug=TENANT, limits=limits)
    assert versions() == before, "a second call with the same limits must change nothing"
    hard = core.read_namespaced_resource_quota(names.RESOURCE_QUOTA_NAME, ns).spec.hard
    assert hard["requests.nvidia.com/gpu"] == "2" and hard["pods"] == "10"

    cluster.ensure_tenant(
        namespace=ns,
        tenant_slug=TENANT,
        limits=TenantLimits(gpus=3, cpu_millis=6000, memory_mib=8192),
        default_cpu_millis=250,
    )
    hard = core.read_namespaced_resource_quota(names.RESOURCE_QUOTA_NAME, ns).spec.hard
    assert hard["requests.nvidia.com/gpu"] == "3"
    assert hard["limits.cpu"] == "6"
    assert "pods" not in hard
    limit_range = core.read_namespaced_limit_range(names.LIMIT_RANGE_NAME, ns)
    assert limit_range.spec.limits[0].default["cpu"] == "250m"
    assert len(core.list_namespaced_resource_quota(ns).items) == 1
    assert len(core.list_namespaced_limit_range(ns).items) == 1
    account = core.read_namespaced_service_account(names.SERVICE_ACCOUNT_NAME, ns)
    assert account.automount_service_account_token is False
    policies = networking.list_namespaced_network_policy(ns).items
    assert [p.metadata.name for p in policies] == [names.NETWORK_POLICY_NAME]
    assert core.read_namespace(ns).metadata.labels[names.LABEL_TENANT] == TENANT


def test_launch_creates_secret_service_and_pods_and_a_second_launch_adopts_them(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str, tmp_path: Path
) -> None:
    secret_name = names.datastore_secret_name(job_id, 0)
    spec = job_spec(
        ns,
        job_id,
        python(wait_file_code(tmp_path / "done")),
        learners=2,
        datastore_secret=secret_name,
        datastore_keys=datastore_secret_keys(CREDENTIALS),
    )
    first = cluster.launch(spec=spec, credentials=CREDENTIALS)
    second = cluster.launch(spec=spec, credentials=CREDENTIALS)

    assert first == second == [names.learner_pod_name(job_id, 0, 0), names.learner_pod_name(job_id, 0, 1)]
    pods = cluster.job_pods(namespace=ns, job_id=job_id)
    assert [p["metadata"]["name"] for p in pods] == first
    assert pods[1]["metadata"]["labels"][names.LABEL_LEARNER] == "1"
    assert len(core.list_namespaced_service(ns).items) == 1
    secret = core.read_namespaced_secret(secret_name, ns)
    assert base64.b64decode(secret.data["STORE_SECRET_ACCESS_KEY"]) == b"s3cr3t"
    service = core.read_namespaced_service(names.service_name(job_id, 0), ns)
    assert service.spec.cluster_ip == "None"
    wait_for(lambda: pod_phase(cluster, ns, first[0]) == "Running")


def test_launch_raises_conflict_when_a_name_belongs_to_something_else(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str
) -> None:
    foreign = client.V1Service(
        metadata=client.V1ObjectMeta(name=names.service_name(job_id, 0), labels={"app": "other"}),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)]),
    )
    core.create_namespaced_service(ns, foreign)
    with pytest.raises(Conflict) as err:
        cluster.launch(spec=job_spec(ns, job_id, python("pass")))
    assert err.value.status == 409
    assert cluster.job_pods(namespace=ns, job_id=job_id) == []

    other_attempt = job_spec(ns, job_id, python("pass"), attempt=1)
    cluster.launch(spec=other_attempt)
    clash = job_spec(ns, f"{job_id}x", python("pass"), attempt=1)
    core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=names.learner_pod_name(clash.job_id, 1, 0)),
            spec=client.V1PodSpec(
                containers=[client.V1Container(name="x", image="x", command=python("pass"))]
            ),
        ),
    )
    with pytest.raises(Conflict):
        cluster.launch(spec=clash)


def test_teardown_removes_everything_of_one_attempt(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str, tmp_path: Path
) -> None:
    command = python(wait_file_code(tmp_path / "never"))
    keys = datastore_secret_keys(CREDENTIALS)
    for attempt in (0, 1):
        secret = names.datastore_secret_name(job_id, attempt)
        spec = job_spec(
            ns, job_id, command, attempt=attempt, learners=2, datastore_secret=secret, datastore_keys=keys
        )
        cluster.launch(spec=spec, credentials=CREDENTIALS)

    assert cluster.teardown(namespace=ns, job_id=job_id, attempt=0, grace_seconds=0) == 4
    wait_for(lambda: not cluster.job_pods(namespace=ns, job_id=job_id, attempt=0))
    selector = names.job_selector(job_id, 0)
    assert core.list_namespaced_service(ns, label_selector=selector).items == []
    assert core.list_namespaced_secret(ns, label_selector=selector).items == []
    assert len(cluster.job_pods(namespace=ns, job_id=job_id, attempt=1)) == 2
    assert cluster.teardown(namespace=ns, job_id=job_id, attempt=0) == 0

    assert cluster.teardown(namespace=ns, job_id=job_id, grace_seconds=0) == 4
    wait_for(lambda: not cluster.job_pods(namespace=ns, job_id=job_id))


@pytest.mark.kubesim_only
def test_transient_500s_are_retried_until_the_call_succeeds(
    cluster: Cluster, sim: KubeSim, ns: str, job_id: str
) -> None:
    rule = sim.inject_fault("GET", rf"^/api/v1/namespaces/{ns}/pods$", code=500, count=RETRIES)
    assert cluster.job_pods(namespace=ns, job_id=job_id) == []
    assert rule not in sim.cluster.faults.rules()


@pytest.mark.kubesim_only
def test_persistent_500s_give_up_with_unavailable_after_the_retries(
    cluster: Cluster, sim: KubeSim, ns: str, job_id: str
) -> None:
    rule = sim.inject_fault("GET", rf"^/api/v1/namespaces/{ns}/pods$", code=503, count=RETRIES + 5)
    with pytest.raises(Unavailable) as err:
        cluster.job_pods(namespace=ns, job_id=job_id)
    assert err.value.status == 503
    assert rule.count == 4, "one first try plus exactly RETRIES retries"


@pytest.mark.kubesim_only
def test_not_found_is_raised_at_once_without_retrying(cluster: Cluster, sim: KubeSim, ns: str) -> None:
    rule = sim.inject_fault("GET", rf"^/api/v1/namespaces/{ns}/pods/ghost$", code=404, count=5)
    with pytest.raises(NotFound):
        cluster._json(cluster.core.read_namespaced_pod, "ghost", ns)
    assert rule.count == 4
    sim.clear_faults()
    assert cluster.get_pod(namespace=ns, pod="ghost") is None
    assert cluster.delete_pod(namespace=ns, pod="ghost") is False
    assert cluster.pod_log_tail(namespace=ns, pod="ghost") == []
    assert cluster.pod_metrics(namespace=ns, pod="ghost") is None


def test_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    dead = Cluster(kubeconfig=str(kubeconfig), request_timeout=1.0, retries=1, backoff=0.01)
    with pytest.raises(Unavailable):
        dead.managed_pods()


@pytest.mark.kubesim_only
def test_gpu_products_read_the_feature_discovery_label_else_gkes_accelerator_label(
    cluster: Cluster, sim: KubeSim
) -> None:
    sim.add_gpu_node("gke-t4-0", gpus=1, labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"})
    # A GKE node without GPU feature discovery: kubesim's GPU nodes carry its label, take it off.
    cluster.core.patch_node("gke-t4-0", {"metadata": {"labels": {"nvidia.com/gpu.product": None}}})
    both = {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        "nvidia.com/gpu.product": "NVIDIA-A100-X",
    }
    sim.add_gpu_node("gke-a100-0", gpus=1, labels=both)
    try:
        products = cluster.gpu_products()
        assert {"nvidia-tesla-t4", "NVIDIA-A100-X", "Simulated-GPU"} <= set(products)
        assert "nvidia-tesla-a100" not in products and products == sorted(set(products))
        types = {n.name: n.gpu_type for n in cluster.nodes()}
        assert types["gke-t4-0"] == "nvidia-tesla-t4" and types["gke-a100-0"] == "NVIDIA-A100-X"
    finally:
        sim.lose_node("gke-t4-0")
        sim.lose_node("gke-a100-0")


@pytest.mark.kubesim_only  # the gate is a hostPath folder the test writes on the node: kubesim's, on this host
def test_node_free_capacity_drops_while_a_pod_runs_and_returns_when_it_ends(
    cluster: Cluster, ns: str, job_id: str, gate: Gate
) -> None:
    def gpu_node_free() -> tuple[int, int, int]:
        node = next(n for n in cluster.nodes() if n.gpu_type == "Simulated-GPU")
        assert node.ready and node.allocatable.gpus == 4
        return node.free.gpus, node.free.cpu_millis, node.free.memory_mib

    idle = gpu_node_free()
    code = gate.wait_code("done")
    spec = job_spec(ns, job_id, python(code), gpus=1, cpu_millis=1500, memory_mib=512, volumes=[gate.volume])
    [pod] = cluster.launch(spec=spec)
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Running")
    assert gpu_node_free() == (idle[0] - 1, idle[1] - 1500, idle[2] - 512)
    pods, resource_version = cluster.managed_pods()
    assert pod in [p["metadata"]["name"] for p in pods] and int(resource_version) > 0

    gate.open("done")
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded")
    assert gpu_node_free() == idle


def test_pod_log_tail_and_metrics_of_a_running_pod(
    cluster: Cluster, ns: str, job_id: str, tmp_path: Path
) -> None:
    code = "for i in range(50): print('line', i)\n" + wait_file_code(tmp_path / "done")
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(code)))
    wait_for(
        lambda: cluster.pod_log_tail(namespace=ns, pod=pod, lines=3) == ["line 47", "line 48", "line 49"]
    )
    metrics = wait_for(lambda: cluster.pod_metrics(namespace=ns, pod=pod))
    assert metrics["kind"] == "PodMetrics"
    assert [c["name"] for c in metrics["containers"]] == ["learner"]
    assert cluster.delete_pod(namespace=ns, pod=pod) is True


def test_a_pod_over_the_tenant_quota_is_a_quota_refusal_not_a_permanent_one(
    cluster: Cluster, ns: str, job_id: str
) -> None:
    cluster.ensure_tenant(namespace=ns, tenant_slug=TENANT, limits=TenantLimits(0, 4000, 8192))
    with pytest.raises(QuotaExceeded) as err:
        cluster.launch(spec=job_spec(ns, job_id, python("pass"), gpus=1))
    assert err.value.status == 403 and "exceeded quota" in err.value.message
    assert isinstance(err.value, Forbidden)
    rbac = error_for_status(403, "Forbidden", 'pods is forbidden: User "x" cannot create resource "pods"')
    assert type(rbac) is Forbidden, "an RBAC refusal stays permanent"


def test_force_delete_removes_a_pod_at_once(cluster: Cluster, ns: str, job_id: str, tmp_path: Path) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(wait_file_code(tmp_path / "never"))))
    wait_for(
        lambda: (cluster.get_pod(namespace=ns, pod=pod) or {}).get("status", {}).get("phase") == "Running"
    )
    assert cluster.delete_pod(namespace=ns, pod=pod, grace_seconds=0) is True
    assert cluster.get_pod(namespace=ns, pod=pod) is None


def test_two_installations_on_one_cluster_see_and_tear_down_only_their_own_objects(
    sim: KubeSim, ns: str, job_id: str
) -> None:
    production = Cluster(kubeconfig=str(sim.kubeconfig_path), installation="production")
    staging = Cluster(kubeconfig=str(sim.kubeconfig_path), installation="staging")
    try:
        [pod] = production.launch(spec=job_spec(ns, job_id, python("import time; time.sleep(60)")))
        labels = production.get_pod(namespace=ns, pod=pod)["metadata"]["labels"]
        assert labels[names.LABEL_INSTALLATION] == "production"
        assert [p["metadata"]["name"] for p in production.job_pods(namespace=ns, job_id=job_id)] == [pod]
        assert staging.job_pods(namespace=ns, job_id=job_id) == []
        assert pod not in {p["metadata"]["name"] for p in staging.managed_pods()[0]}
        assert staging.teardown(namespace=ns, job_id=job_id) == 0
        with pytest.raises(Conflict):  # the names are taken by the other installation's objects
            staging.launch(spec=job_spec(ns, job_id, python("pass")))
        assert production.teardown(namespace=ns, job_id=job_id, grace_seconds=0) >= 2  # pod and Service
    finally:
        production.close()
        staging.close()


def test_ready_node_names_are_the_nodes_that_report_ready(cluster: Cluster) -> None:
    assert cluster.ready_node_names() == {n.name for n in cluster.nodes() if n.ready}
    assert cluster.ready_node_names(), "kubesim's nodes are Ready"
